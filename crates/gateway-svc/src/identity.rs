//! Who is asking: the buyer (header or JWT mode) and the admin (a bearer token).

use std::future::{Ready, ready};

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};
use domain::UserId;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use platform::settings::AuthMode;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

use crate::error::ApiError;

/// How identities are checked; built once from the settings.
pub struct IdentityConfig {
    mode: AuthMode,
    jwt_key: DecodingKey,
    jwt_validation: Validation,
    admin_token: SecretString,
}

impl IdentityConfig {
    pub fn new(mode: AuthMode, jwt_secret: &SecretString, admin_token: SecretString) -> Self {
        // Only HS256: a token naming another algorithm (or "none") is refused outright.
        let mut jwt_validation = Validation::new(Algorithm::HS256);
        jwt_validation.validate_nbf = true;
        jwt_validation.leeway = 5;
        jwt_validation.set_required_spec_claims(&["exp", "sub"]);
        Self {
            mode,
            jwt_key: DecodingKey::from_secret(jwt_secret.expose_secret().as_bytes()),
            jwt_validation,
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
