//! The seckill service binary: settings from file and environment, then serve.

use seckill::{config::Settings, startup::Application, telemetry};

#[actix_web::main]
async fn main() -> std::process::ExitCode {
    telemetry::init_tracing();
    let settings = match Settings::load() {
        Ok(settings) => settings,
        Err(e) => {
            tracing::error!(error = %e, "cannot start");
            return std::process::ExitCode::from(2);
        }
    };
    tracing::info!(?settings, "starting");
    let app = match Application::build(&settings).await {
        Ok(app) => app,
        Err(e) => {
            tracing::error!(error = %e.chain(), "cannot start");
            return std::process::ExitCode::FAILURE;
        }
    };
    match app.run_until_stopped().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "server failed");
            std::process::ExitCode::FAILURE
        }
    }
}
