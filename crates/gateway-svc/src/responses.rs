//! The error responses the OpenAPI document names (`response = Conflict`, …), one per
//! status, built from [`ApiError::every_kind`]: each status lists exactly the codes that map
//! to it. They sit next to the errors they describe, so that a handler names its responses
//! without reaching into the document, and the document into the handlers.

use actix_web::ResponseError;
use actix_web::http::StatusCode;
use utoipa::ToResponse;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};
use utoipa::openapi::{ContentBuilder, RefOr, Response, ResponseBuilder};

use crate::error::ApiError;

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
