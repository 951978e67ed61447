//! `/openapi.json` is the real spec of the routes: every documented operation exists and answers
//! with a documented status, and every route the service serves is documented.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{ADMIN_TOKEN, sale_body, spawn_app};

/// The routes the service registers (see `routes::configure`).
const SERVED: &[(&str, &str)] = &[
    ("get", "/"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/openapi.json"),
    ("get", "/v1/sales"),
    ("put", "/v1/sales/{sku}"),
    ("get", "/v1/sales/{sku}"),
    ("post", "/v1/sales/{sku}/orders"),
    ("get", "/v1/sales/{sku}/audit"),
    ("get", "/v1/sales/{sku}/owners"),
    ("get", "/v1/sales/{sku}/live"),
    ("post", "/v1/sales/{sku}/reconcile"),
    ("get", "/v1/orders/{id}"),
    ("post", "/v1/orders/{id}/pay"),
    ("post", "/v1/orders/{id}/cancel"),
];

#[tokio::test]
async fn the_spec_documents_exactly_the_served_routes_and_their_statuses() {
    let app = spawn_app().await;
    let (status, spec) = app.get_json("/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    let sku = app.create_sale(sale_body(10, 2, "sharded-fenced")).await;

    let mut documented = Vec::new();
    for (path, item) in spec["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap().iter().filter(|(m, _)| *m != "parameters") {
            documented.push((method.clone(), path.clone()));
            let url = format!("{}{}", app.address, path.replace("{sku}", &sku));
            let mut request = app.http.request(Method::from_bytes(method.to_uppercase().as_bytes()).unwrap(), url);
            request = match (method.as_str(), path.as_str()) {
                ("put", _) => request.bearer_auth(ADMIN_TOKEN).json(&sale_body(10, 2, "sharded-fenced")),
                ("post", _) => request.json(&json!({"user_id": "spec-user", "quantity": 1})),
                _ => request,
            };
            let answered = request.send().await.unwrap().status().as_u16().to_string();
            let statuses: &Value = &operation["responses"];
            assert!(statuses.get(&answered).is_some(), "{method} {path} answered {answered}, not in the spec");
        }
    }

    let mut served: Vec<_> = SERVED.iter().map(|(m, p)| (m.to_string(), p.to_string())).collect();
    served.sort();
    documented.sort();
    assert_eq!(documented, served);
}
