//! The live view (`GET /v1/sales/{sku}/live`), the sale list and the page.

use reqwest::StatusCode;
use serde_json::Value;

use crate::helpers::{assert_error, sale_body, spawn_app, spawn_app_with, test_settings};

#[tokio::test]
async fn the_live_view_shows_shards_owners_fences_and_this_instances_answers() {
    let mut settings = test_settings();
    settings.instance = "live-a".into();
    let app = spawn_app_with(settings).await;
    let sku = app.create_sale(sale_body(40, 4, "owned-shards")).await;
    for user in 0..6 {
        assert_eq!(app.order(&sku, &format!("u{user}"), 1, None).await.status(), StatusCode::CREATED);
    }
    // The traffic window holds completed seconds only.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;

    let (status, live) = app.get_json(&format!("/v1/sales/{sku}/live")).await;

    assert_eq!(status, StatusCode::OK);
    assert_eq!(live["instance"], "live-a");
    assert_eq!(live["sale"]["total"], 40);
    assert_eq!(live["sale"]["sold"], 6, "total - remaining over the shards: {live}");
    let units = ["reserved", "paid", "returned"].map(|k| live["sale"][k].as_i64());
    assert_eq!(units, [Some(6), Some(0), Some(0)], "an owned sale's orders are reserved until paid: {live}");
    let shards = live["sale"]["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 4);
    let claimed: Vec<&Value> = shards.iter().filter(|s| s["owner"] == "live-a").collect();
    assert!(!claimed.is_empty(), "the shards it sold from name it as owner: {live}");
    assert!(claimed.iter().all(|s| s["fence"].as_u64().unwrap() >= 1));
    assert_eq!(live["traffic"]["answers"]["accepted"], 6);
    assert!(live["traffic"]["p99_ms_at_most"].is_u64());
    assert_eq!(live["sale"]["fence_rejections"], 0);
}

#[tokio::test]
async fn the_live_view_of_an_unknown_or_invalid_sale_is_a_clear_4xx() {
    let app = spawn_app().await;

    let unknown = app.http.get(format!("{}/v1/sales/no-such-sale-here/live", app.address)).send().await.unwrap();
    assert_error(unknown, StatusCode::NOT_FOUND, "unknown_sale").await;
    let invalid = app.http.get(format!("{}/v1/sales/bad%20sku/live", app.address)).send().await.unwrap();
    assert_error(invalid, StatusCode::BAD_REQUEST, "invalid_request").await;
}

#[tokio::test]
async fn the_page_and_the_sale_list_are_served() {
    let app = spawn_app().await;
    let sku = app.create_sale(sale_body(10, 2, "db-atomic")).await;

    let page = app.http.get(format!("{}/", app.address)).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    assert!(page.text().await.unwrap().to_lowercase().contains("<title>"));

    let (status, list) = app.get_json("/v1/sales").await;
    assert_eq!(status, StatusCode::OK);
    let listed = list["sales"].as_array().unwrap();
    assert!(listed.len() <= 50);
    assert!(listed.iter().any(|s| s["sku"] == sku.as_str() && s["shards"] == 2 && s["strategy"] == "db-atomic"));
}

/// A lab sale has no payment window: its orders are paid when bought, and no payment counts them.
#[tokio::test]
async fn the_live_view_shows_a_lab_sales_orders_as_paid() {
    let app = spawn_app().await;
    let sku = app.create_sale(sale_body(10, 2, "db-atomic")).await;
    assert_eq!(app.order(&sku, "u", 2, None).await.status(), StatusCode::CREATED);

    let (_, live) = app.get_json(&format!("/v1/sales/{sku}/live")).await;

    let units = ["reserved", "paid", "returned"].map(|k| live["sale"][k].as_i64());
    assert_eq!(units, [Some(0), Some(2), Some(0)], "{live}");
}
