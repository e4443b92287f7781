//! The admin bearer token, checked the same way by every service that has admin endpoints.

use actix_web::HttpRequest;
use actix_web::http::header::AUTHORIZATION;
use secrecy::{ExposeSecret, SecretString};
use subtle::ConstantTimeEq;

/// The `Authorization: Bearer <token>` value, if any.
pub fn bearer(request: &HttpRequest) -> Option<&str> {
    request
        .headers()
        .get(AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
}

/// True when the request carries the admin token. Compared in constant time, so the token
/// cannot be guessed byte by byte from response times.
pub fn is_admin(request: &HttpRequest, admin_token: &SecretString) -> bool {
    let expected = admin_token.expose_secret().as_bytes();
    bearer(request).is_some_and(|given| given.as_bytes().ct_eq(expected).into())
}
