//! Who is asking: the buyer (header or JWT mode) and the admin (a bearer token).

use std::future::{Ready, ready};

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};
use domain::UserId;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

use crate::error::ApiError;
use crate::settings::{AuthMode, AuthSettings};

/// How identities are checked; built once from the settings.
pub struct IdentityConfig {
    mode: AuthMode,
    jwt_key: DecodingKey,
    jwt_validation: Validation,
    admin_token: SecretString,
}

impl IdentityConfig {
    pub fn new(auth: &AuthSettings, admin_token: SecretString) -> Self {
        Self {
            mode: auth.mode,
            jwt_key: DecodingKey::from_secret(auth.jwt_secret.expose_secret().as_bytes()),
            jwt_validation: jwt_validation(auth),
            admin_token,
        }
    }

    fn buyer(&self, request: &HttpRequest) -> Result<UserId, ApiError> {
        match self.mode {
            AuthMode::Header => request
                .headers()
                .get("x-user-id")
                .ok_or(ApiError::Unauthenticated("the X-User-Id header is missing"))?
                .to_str()
                .ok()
                .and_then(|value| value.parse().ok())
                .ok_or(ApiError::Unauthenticated("X-User-Id is not a u64 user id")),
            AuthMode::Jwt => {
                #[derive(Deserialize)]
                struct Claims {
                    sub: String,
                }
                let token = platform::auth::bearer(request)
                    .ok_or(ApiError::Unauthenticated("a Bearer token is required"))?;
                let claims =
                    jsonwebtoken::decode::<Claims>(token, &self.jwt_key, &self.jwt_validation)
                        .map_err(|_| ApiError::Unauthenticated("the JWT is invalid or expired"))?;
                claims
                    .claims
                    .sub
                    .parse()
                    .map_err(|_| ApiError::Unauthenticated("the JWT's sub is not a u64 user id"))
            }
        }
    }

    fn is_admin(&self, request: &HttpRequest) -> bool {
        platform::auth::is_admin(request, &self.admin_token)
    }
}

/// What a buyer's JWT must be. Only HS256: a token naming another algorithm (or `none`) is
/// refused outright. A configured issuer or audience is required, not merely checked when
/// present: a token without it was meant for someone else. With no audience configured, a
/// token that names one is refused (RFC 7519: a recipient not among the audience rejects).
fn jwt_validation(auth: &AuthSettings) -> Validation {
    let mut validation = Validation::new(Algorithm::HS256);
    validation.validate_nbf = true;
    validation.leeway = 5;
    let mut required = vec!["exp", "sub"];
    if !auth.jwt_issuer.is_empty() {
        validation.set_issuer(&[&auth.jwt_issuer]);
        required.push("iss");
    }
    if !auth.jwt_audience.is_empty() {
        validation.set_audience(&[&auth.jwt_audience]);
        required.push("aud");
    }
    validation.set_required_spec_claims(&required);
    validation
}

fn config(request: &HttpRequest) -> &IdentityConfig {
    request
        .app_data::<web::Data<IdentityConfig>>()
        .expect("IdentityConfig is registered at start-up")
}

/// The authenticated buyer of a request.
#[derive(Debug, Clone, Copy)]
pub struct Buyer(pub UserId);

impl FromRequest for Buyer {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(config(request).buyer(request).map(Buyer))
    }
}

/// Proof that the request carries the admin token.
#[derive(Debug, Clone, Copy)]
pub struct Admin;

impl FromRequest for Admin {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(if config(request).is_admin(request) {
            Ok(Admin)
        } else {
            Err(ApiError::Unauthenticated("a valid admin token is required"))
        })
    }
}
