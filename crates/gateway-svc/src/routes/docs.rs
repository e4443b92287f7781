//! The gateway's OpenAPI document: every documented route, gathered from the handlers'
//! own attributes, and the handler that serves it (see [`crate::openapi`] for the parts
//! added by hand).

use actix_web::{HttpResponse, web};
use utoipa::OpenApi;

use crate::openapi::{self, Document};
use crate::responses::{
    BadRequest, Conflict, Forbidden, HeadersTooLarge, MethodNotAllowed, NotFound, PayloadTooLarge,
    RateLimited, Unauthenticated, Unavailable,
};
use crate::routes::{OPS_PATHS, admin, buyer, orders, payments, reload};
use crate::settings::AuthMode;

#[derive(OpenApi)]
#[openapi(
    info(title = "seckill gateway"),
    paths(
        buyer::issue_token,
        buyer::purchase,
        orders::order_status,
        orders::order_events,
        orders::cancel_order,
        payments::notify_payment,
        admin::put_product,
        admin::get_product,
        reload::reload_product,
        serve,
    ),
    components(responses(
        BadRequest,
        Unauthenticated,
        Forbidden,
        NotFound,
        Conflict,
        PayloadTooLarge,
        HeadersTooLarge,
        MethodNotAllowed,
        RateLimited,
        Unavailable,
    )),
    tags(
        (name = "buyer", description = "A buyer's way through a sale."),
        (name = "payments", description = "The payment provider's callback (signed, no buyer)."),
        (name = "admin", description = "The operator's product endpoints (admin bearer token)."),
        (name = "ops", description = "Probes and metrics."),
        (name = "docs", description = "This document."),
    )
)]
struct ApiDoc;

/// The whole document for a gateway whose buyers authenticate the `mode` way.
pub fn document(mode: AuthMode) -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    openapi::complete(&mut doc, mode, &OPS_PATHS);
    doc
}

/// The document as this gateway serves it, serialized once at start-up.
pub fn served(mode: AuthMode) -> Document {
    Document::new(&document(mode))
}

/// The OpenAPI document of this gateway.
///
/// Generated from the handlers and the types they parse and answer with; buyer
/// authentication is described as this gateway is configured (`auth.mode`).
#[utoipa::path(
    get,
    path = "/api-docs/openapi.json",
    operation_id = "openapi",
    tag = "docs",
    responses(
        (status = 200, description = "The OpenAPI 3.1 document.", body = Object),
    )
)]
pub async fn serve(document: web::Data<Document>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(document.0.clone())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::error::ApiError;
    use crate::openapi::BUYER_SCHEME;

    fn json(mode: AuthMode) -> serde_json::Value {
        serde_json::to_value(document(mode)).unwrap()
    }

    #[test]
    fn the_description_points_at_the_contract_in_the_repository() {
        let doc = json(AuthMode::Header);
        let description = doc["info"]["description"].as_str().unwrap();
        assert!(description.contains("docs/api.md"), "{description}");
    }

    #[test]
    fn every_error_code_is_documented_under_its_status() {
        let doc = json(AuthMode::Header);
        let responses = &doc["components"]["responses"];
        let mut documented = BTreeSet::new();
        for (_, response) in responses.as_object().unwrap() {
            let codes = &response["content"]["application/json"]["schema"]["properties"]["error"]["properties"]
                ["code"]["enum"];
            for code in codes.as_array().unwrap() {
                documented.insert(code.as_str().unwrap().to_owned());
            }
        }
        let every: BTreeSet<_> = ApiError::every_kind()
            .iter()
            .map(|error| error.code().to_owned())
            .collect();
        assert_eq!(documented, every);
    }

    #[test]
    fn the_buyer_scheme_follows_the_auth_mode() {
        let header = json(AuthMode::Header);
        let scheme = &header["components"]["securitySchemes"][BUYER_SCHEME];
        assert_eq!(scheme["type"], "apiKey");
        assert_eq!(scheme["in"], "header");
        assert_eq!(scheme["name"], "X-User-Id");

        let jwt = json(AuthMode::Jwt);
        let scheme = &jwt["components"]["securitySchemes"][BUYER_SCHEME];
        assert_eq!(scheme["type"], "http");
        assert_eq!(scheme["scheme"], "bearer");
    }

    #[test]
    fn every_security_requirement_names_a_defined_scheme() {
        let doc = json(AuthMode::Header);
        let schemes = doc["components"]["securitySchemes"].as_object().unwrap();
        let mut named = 0;
        for item in doc["paths"].as_object().unwrap().values() {
            for operation in item.as_object().unwrap().values() {
                for requirement in operation["security"].as_array().into_iter().flatten() {
                    for name in requirement.as_object().unwrap().keys() {
                        assert!(schemes.contains_key(name), "no scheme {name}");
                        named += 1;
                    }
                }
            }
        }
        assert!(named > 0);
    }

    #[test]
    fn every_reference_resolves() {
        let doc = json(AuthMode::Header);
        let mut refs = Vec::new();
        collect_refs(&doc, &mut refs);
        assert!(!refs.is_empty());
        for reference in refs {
            let pointer = reference.strip_prefix('#').expect("a local reference");
            assert!(
                doc.pointer(pointer).is_some(),
                "{reference} resolves to nothing"
            );
        }
    }

    fn collect_refs(value: &serde_json::Value, refs: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) => {
                for (key, value) in map {
                    match value {
                        serde_json::Value::String(s) if key == "$ref" => refs.push(s.clone()),
                        other => collect_refs(other, refs),
                    }
                }
            }
            serde_json::Value::Array(items) => {
                for item in items {
                    collect_refs(item, refs);
                }
            }
            _ => {}
        }
    }
}
