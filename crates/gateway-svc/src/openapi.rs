//! The gateway's OpenAPI 3.1 document, served at `GET /api-docs/openapi.json`.
//!
//! It is derived from the code it describes, so that it cannot drift far from it: the
//! handlers' `#[utoipa::path]` attributes, the `ToSchema` of the very types they parse and
//! answer with, and, for every error response, [`ApiError::every_kind`] — each status lists
//! exactly the codes that map to it. Two parts are added here by hand: the ops endpoints
//! that `platform::ops` mounts on the same server, and the buyer's security scheme, which
//! depends on `auth.mode` (the `X-User-Id` header, or a JWT).
//!
//! `tests/api/openapi.rs` holds the document to the routes that [`crate::routes`] mounts;
//! `deploy/test/schemathesis.sh` holds a running gateway to the document.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError, web};
use platform::settings::AuthMode;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{HttpMethod, OperationBuilder};
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};
use utoipa::{OpenApi, ToResponse};

use crate::error::ApiError;
use crate::routes::{OPS_PATHS, admin, buyer, reload};

/// Where the document is served.
pub const PATH: &str = "/api-docs/openapi.json";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "seckill gateway",
        description = "The flash-sale gateway: purchase tokens, purchases, order status, and the \
            operator's product endpoints. The contract is API.md; its extensions are in the \
            README's API section. Every error is JSON: `{\"error\": {\"code\", \"message\"}}`."
    ),
    paths(
        buyer::issue_token,
        buyer::purchase,
        buyer::order_status,
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
        (name = "admin", description = "The operator's product endpoints (admin bearer token)."),
        (name = "ops", description = "Probes and metrics."),
        (name = "docs", description = "This document."),
    )
)]
struct ApiDoc;

/// The whole document for a gateway whose buyers authenticate the `mode` way.
pub fn document(mode: AuthMode) -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    for path in OPS_PATHS {
        doc.paths
            .add_path_operation(path, vec![HttpMethod::Get], ops_operation(path));
    }
    let components = doc.components.get_or_insert_with(Default::default);
    components.add_security_scheme(BUYER_SCHEME, buyer_scheme(mode));
    components.add_security_scheme(
        ADMIN_SCHEME,
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some(
                    "`Authorization: Bearer <admin.token>`; wrong or missing: 401.",
                ))
                .build(),
        ),
    );
    doc
}

/// The scheme the buyer endpoints name in their `security(...)` (a literal there: the
/// attribute takes no constant).
pub const BUYER_SCHEME: &str = "buyer";
/// Likewise for the admin endpoints.
pub const ADMIN_SCHEME: &str = "admin";

/// One scheme name, defined by the mode this gateway runs in: the document says how *this*
/// gateway takes the buyer, not how another one might.
fn buyer_scheme(mode: AuthMode) -> SecurityScheme {
    match mode {
        AuthMode::Header => SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
            "X-User-Id",
            "The buyer's id, a u64 (auth.mode = \"header\"); missing or not a u64: 401.",
        ))),
        AuthMode::Jwt => SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .bearer_format("JWT")
                .description(Some(
                    "An HS256 JWT whose `sub` is the buyer's u64 id, `exp` checked \
                     (auth.mode = \"jwt\"); missing, invalid or expired: 401.",
                ))
                .build(),
        ),
    }
}

fn ops_operation(path: &str) -> OperationBuilder {
    let status_body = |value: &str| {
        ContentBuilder::new()
            .schema(Some(
                ObjectBuilder::new()
                    .property(
                        "status",
                        ObjectBuilder::new()
                            .schema_type(Type::String)
                            .enum_values(Some([value])),
                    )
                    .required("status"),
            ))
            .build()
    };
    let operation = OperationBuilder::new().tag("ops");
    match path {
        "/healthz" => operation
            .operation_id(Some("healthz"))
            .summary(Some("Liveness: the process answers."))
            .response(
                "200",
                ResponseBuilder::new()
                    .description("Alive.")
                    .content("application/json", status_body("alive")),
            ),
        "/readyz" => operation
            .operation_id(Some("readyz"))
            .summary(Some("Readiness: Redis and MySQL answer."))
            .response(
                "200",
                ResponseBuilder::new()
                    .description("Ready.")
                    .content("application/json", status_body("ready")),
            )
            .response("503", Ref::from_response_name(Unavailable::NAME)),
        "/metrics" => operation
            .operation_id(Some("metrics"))
            .summary(Some("Prometheus metrics, text exposition format 0.0.4."))
            .response(
                "200",
                ResponseBuilder::new().description("The metrics.").content(
                    "text/plain",
                    ContentBuilder::new()
                        .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
                        .build(),
                ),
            ),
        other => unreachable!("{other} is not an ops path"),
    }
}

/// The document, serialized once at start-up.
pub struct Document(web::Bytes);

impl Document {
    pub fn new(mode: AuthMode) -> Self {
        let json = document(mode)
            .to_json()
            .expect("an OpenAPI document always serializes");
        Self(web::Bytes::from(json))
    }
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

/// An integer from `min` to `max`, with no `format`: the standard ones (`int32`, `int64`)
/// are signed. (Fields say `format = "uint32"` / `"uint64"` and their maximum, likewise.)
fn integer(min: u64, max: u64) -> Object {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .minimum(Some(min))
        .maximum(Some(max))
        .build()
}

/// The error body of one status, listing the codes of [`ApiError`] that map to it.
fn error_response(status: StatusCode, when: &str) -> Response {
    let codes: Vec<&str> = ApiError::every_kind()
        .iter()
        .filter(|error| error.status_code() == status)
        .map(ApiError::code)
        .collect();
    assert!(!codes.is_empty(), "no ApiError maps to {status}");
    let detail = ObjectBuilder::new()
        .property(
            "code",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(codes.iter().copied())),
        )
        .required("code")
        .property(
            "message",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .description(Some("For a person to read; not meant to be parsed.")),
        )
        .required("message");
    let body = ObjectBuilder::new()
        .property("error", detail)
        .required("error");
    let mut response = ResponseBuilder::new()
        .description(format!("{when} (`{}`)", codes.join("`, `")))
        .content(
            "application/json",
            ContentBuilder::new().schema(Some(body)).build(),
        );
    if status == StatusCode::TOO_MANY_REQUESTS {
        response = response.header(
            "Retry-After",
            HeaderBuilder::new()
                .schema(Some(integer(1, u64::MAX)))
                .description(Some("Whole seconds to wait before trying again."))
                .build(),
        );
    }
    if status == StatusCode::METHOD_NOT_ALLOWED {
        response = response.header(
            "Allow",
            HeaderBuilder::new()
                .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
                .description(Some("The methods the path has, e.g. `GET, PUT`."))
                .build(),
        );
    }
    response.build()
}

/// Declares the reusable error responses, one per status, named for it.
macro_rules! error_responses {
    ($($name:ident = $status:ident, $when:literal;)*) => {$(
        #[doc = $when]
        pub struct $name;

        impl $name {
            pub const NAME: &'static str = stringify!($name);
        }

        impl<'r> ToResponse<'r> for $name {
            fn response() -> (&'r str, RefOr<Response>) {
                (Self::NAME, error_response(StatusCode::$status, $when).into())
            }
        }
    )*};
}

error_responses! {
    BadRequest = BAD_REQUEST,
        "Malformed: a body that is not JSON or not this operation's, a field out of range, \
         a path id that is not a u64";
    Unauthenticated = UNAUTHORIZED, "No identity, or an invalid one";
    Forbidden = FORBIDDEN, "The purchase token is not valid here, or the sale is not open";
    NotFound = NOT_FOUND, "No such product or order (or the order is another buyer's)";
    Conflict = CONFLICT, "The state of the sale refuses the request";
    PayloadTooLarge = PAYLOAD_TOO_LARGE, "The body is larger than gateway.max_body_bytes";
    HeadersTooLarge = REQUEST_HEADER_FIELDS_TOO_LARGE,
        "The headers are larger than gateway.max_header_bytes (any operation)";
    MethodNotAllowed = METHOD_NOT_ALLOWED,
        "A known path asked with a method it does not have (no operation lists it: any \
         method not documented for a path gets this)";
    RateLimited = TOO_MANY_REQUESTS, "Over a rate limit";
    Unavailable = SERVICE_UNAVAILABLE,
        "Redis, MySQL or the broker cannot be reached, or the product is not loaded";
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn json(mode: AuthMode) -> serde_json::Value {
        serde_json::to_value(document(mode)).unwrap()
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
