use reqwest::StatusCode;

use crate::helpers::spawn_app;

#[tokio::test]
async fn healthz_and_readyz_answer_when_dependencies_are_up() {
    let app = spawn_app().await;

    let (health, _) = app.get_json("/healthz").await;
    let (ready, body) = app.get_json("/readyz").await;

    assert_eq!(health, StatusCode::OK);
    assert_eq!(ready, StatusCode::OK);
    assert_eq!(body["postgres"], "ok");
    assert_eq!(body["redis"], "ok");
}

#[tokio::test]
async fn metrics_expose_service_and_lockkit_series() {
    let app = spawn_app().await;
    let sku = app.create_sale(crate::helpers::sale_body(10, 2, "sharded-fenced")).await;
    assert_eq!(app.order(&sku, "metrics-user", 1, None).await.status(), StatusCode::CREATED);

    let text = app.http.get(format!("{}/metrics", app.address)).send().await.unwrap().text().await.unwrap();

    assert!(text.contains("seckill_orders_total"), "{text}");
    assert!(text.contains("lockkit_acquire_attempts_total"));
    assert!(text.contains("seckill_order_duration_seconds_bucket"), "histograms have buckets");
}

/// Requests are counted by the pattern of the route that answered, never by the raw path (a series
/// per sku, or per URL a scanner probes, would grow without bound); a path no route matches is
/// `unmatched`.
#[tokio::test]
async fn requests_are_counted_by_route_pattern() {
    let app = spawn_app().await;
    let sku = app.create_sale(crate::helpers::sale_body(10, 2, "sharded-fenced")).await;
    assert_eq!(app.order(&sku, "route-user", 1, None).await.status(), StatusCode::CREATED);
    app.http.get(format!("{}/v2/probe-{sku}", app.address)).send().await.unwrap();

    let text = app.http.get(format!("{}/metrics", app.address)).send().await.unwrap().text().await.unwrap();

    assert!(text.contains(r#"route="/v1/sales/{sku}/orders""#), "{text}");
    assert!(text.contains(r#"route="unmatched""#), "{text}");
    assert!(!text.contains(&format!("/v1/sales/{sku}")) && !text.contains("/v2/probe"), "no raw path as a label: {text}");
}

/// A client that invents methods cannot create metric series: every unknown method token is one
/// label, `other`.
#[tokio::test]
async fn invented_methods_share_one_metric_label() {
    let app = spawn_app().await;
    for token in ["BREW", "WHEN", "PROPFIND-ME"] {
        let method = reqwest::Method::from_bytes(token.as_bytes()).unwrap();
        app.http.request(method, format!("{}/healthz", app.address)).send().await.unwrap();
    }

    let text = app.http.get(format!("{}/metrics", app.address)).send().await.unwrap().text().await.unwrap();

    assert!(text.contains(r#"method="other""#), "{text}");
    for token in ["BREW", "WHEN", "PROPFIND-ME"] {
        assert!(!text.contains(token), "no series for {token}");
    }
}

#[tokio::test]
async fn unknown_routes_are_a_json_404() {
    let app = spawn_app().await;

    let response = app.http.get(format!("{}/v2/nothing", app.address)).send().await.unwrap();

    crate::helpers::assert_error(response, StatusCode::NOT_FOUND, "not_found").await;
}

/// Started on port 0, the instance writes the port it got to `SECKILL_ADDRESS_FILE`, so that
/// scripts need not read its log.
#[tokio::test]
async fn the_bound_address_is_written_to_the_address_file() {
    let file = std::env::temp_dir().join(format!("seckill-address-{:08x}", rand::random::<u32>()));
    let mut settings = crate::helpers::test_settings();
    settings.address_file = Some(file.clone());

    let app = crate::helpers::spawn_app_with(settings).await;

    let written = std::fs::read_to_string(&file).unwrap();
    assert_eq!(format!("http://{}", written.trim()), app.address);
    std::fs::remove_file(file).unwrap();
}
