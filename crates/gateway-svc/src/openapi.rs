//! The parts of the gateway's OpenAPI 3.1 document that no handler's attribute can say,
//! and the document as served.
//!
//! The document is derived from the code it describes, so that it cannot drift far from it:
//! the handlers' `#[utoipa::path]` attributes and the `ToSchema` of the very types they
//! parse and answer with (gathered in [`crate::routes::docs`]), and for every error
//! response, [`crate::responses`]. Two parts are added here by hand: the ops endpoints that
//! `platform::ops` mounts on the same server, and the buyer's security scheme, which depends
//! on `auth.mode` (the `X-User-Id` header, or a JWT).
//!
//! `tests/api/openapi.rs` holds the document to the routes that [`crate::routes`] mounts;
//! `deploy/test/schemathesis.sh` holds a running gateway to the document.

use actix_web::web;
use utoipa::openapi::path::{HttpMethod, OperationBuilder};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, OpenApi, Ref, ResponseBuilder};

use crate::responses::Unavailable;
use crate::settings::AuthMode;

/// Where the document is served.
pub const PATH: &str = "/api-docs/openapi.json";

/// What the document's description says of the API; the contract itself is docs/api.md.
pub const DESCRIPTION: &str = "The flash-sale gateway: purchase tokens, purchases, order \
    status, and the operator's product endpoints. The contract is docs/api.md in the \
    repository. Every error is JSON: `{\"error\": {\"code\", \"message\"}}`.";

/// Adds to `doc` its description, the ops endpoints (`ops_paths`, all `GET`) and the security schemes of a
/// gateway whose buyers authenticate the `mode` way.
pub fn complete(doc: &mut OpenApi, mode: AuthMode, ops_paths: &[&str]) {
    doc.info.description = Some(DESCRIPTION.to_owned());
    for path in ops_paths {
        doc.paths
            .add_path_operation(*path, vec![HttpMethod::Get], ops_operation(path));
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
            .summary(Some(
                "Readiness: Redis answers (the purchase path's store; MySQL is not asked).",
            ))
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
pub struct Document(pub(crate) web::Bytes);

impl Document {
    pub fn new(doc: &OpenApi) -> Self {
        let json = doc
            .to_json()
            .expect("an OpenAPI document always serializes");
        Self(web::Bytes::from(json))
    }
}
