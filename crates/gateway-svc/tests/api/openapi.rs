//! The OpenAPI document at /api-docs/openapi.json, held to the routes the gateway mounts.
//! (deploy/test/schemathesis.sh holds the answers to the document.)

use std::collections::BTreeSet;

use gateway_svc::routes::Audience;
use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::helpers::{assert_error, body, concrete, spawn_app};

async fn document(app: &crate::helpers::TestApp) -> Value {
    let response = app
        .client
        .get(format!("{}/api-docs/openapi.json", app.address))
        .send()
        .await
        .expect("the gateway answers");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"],
        "application/json",
        "the document is JSON"
    );
    body(response).await
}

/// (METHOD, path) of every operation the document lists.
fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let mut operations = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("a path item").keys() {
            operations.insert((method.to_uppercase(), path.clone()));
        }
    }
    operations
}

#[tokio::test]
async fn the_document_is_served_without_auth_and_lists_exactly_the_mounted_routes() {
    let app = spawn_app().await;
    let doc = document(&app).await;
    assert_eq!(doc["openapi"], "3.1.0");

    let mounted: BTreeSet<_> = gateway_svc::routes::routes(Audience::Everyone)
        .into_iter()
        .map(|(method, path)| (method.as_str().to_owned(), path.to_owned()))
        .collect();
    let documented = documented(&doc);
    assert_eq!(
        documented.difference(&mounted).collect::<Vec<_>>(),
        Vec::<&(String, String)>::new(),
        "documented, not mounted"
    );
    assert_eq!(
        mounted.difference(&documented).collect::<Vec<_>>(),
        Vec::<&(String, String)>::new(),
        "mounted, not documented"
    );
}

#[tokio::test]
async fn every_documented_operation_reaches_a_handler() {
    // `routes()` is what `configure` mounts; this asks the server itself, so that a route
    // documented but lost on its way to the app (or shadowed by another) shows too.
    let app = spawn_app().await;
    let doc = document(&app).await;
    for (method, path) in documented(&doc) {
        let response = app
            .client
            .request(
                Method::from_bytes(method.as_bytes()).unwrap(),
                format!("{}{}", app.address, concrete(&path)),
            )
            .send()
            .await
            .expect("the gateway answers");
        let status = response.status();
        let text = response.text().await.unwrap();
        assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
        assert!(
            !text.contains("route not found"),
            "{method} {path}: {status} {text}"
        );
    }
}

#[tokio::test]
async fn every_error_status_an_operation_documents_has_the_error_body_schema() {
    let app = spawn_app().await;
    let doc = document(&app).await;
    let responses = &doc["components"]["responses"];
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            for (status, response) in operation["responses"].as_object().unwrap() {
                if !status.starts_with('4') && !status.starts_with('5') {
                    continue;
                }
                let reference = response["$ref"].as_str().unwrap_or_else(|| {
                    panic!("{method} {path} {status}: not a shared error response")
                });
                let name = reference.trim_start_matches("#/components/responses/");
                let schema = &responses[name]["content"]["application/json"]["schema"];
                assert_eq!(
                    schema["properties"]["error"]["required"],
                    serde_json::json!(["code", "message"]),
                    "{method} {path} {status}"
                );
            }
        }
    }
}

#[tokio::test]
async fn a_known_path_asked_with_another_method_is_a_405_naming_the_methods_it_has() {
    let app = spawn_app().await;
    for (method, path, allow) in [
        (Method::DELETE, "/admin/v1/products/1", "PUT, GET"),
        (Method::GET, "/api/v1/products/1/purchase", "POST"),
        (Method::POST, "/healthz", "GET"),
        (Method::PUT, "/api-docs/openapi.json", "GET"),
    ] {
        let response = app
            .client
            .request(method.clone(), format!("{}{path}", app.address))
            .send()
            .await
            .expect("the gateway answers");
        assert_eq!(
            response.headers().get("allow").map(|v| v.to_str().unwrap()),
            Some(allow),
            "{method} {path}"
        );
        assert_error(
            response,
            StatusCode::METHOD_NOT_ALLOWED,
            "METHOD_NOT_ALLOWED",
        )
        .await;
    }
    // An unknown path stays a 404, whatever the method.
    let response = app
        .client
        .delete(format!("{}/api/v1/nothing", app.address))
        .send()
        .await
        .unwrap();
    assert_error(response, StatusCode::NOT_FOUND, "NOT_FOUND").await;
}
