//! seckill's HTTP API against real Redis and PostgreSQL (`make services`), one test binary.
//! Set `TEST_LOG=1` to see the service's logs.

mod helpers;

mod audit;
mod batches;
mod browser;
mod concurrency;
mod fencing;
mod gate;
mod health;
mod hints;
mod lifecycle;
mod live;
mod openapi;
mod order_parts;
mod orders;
mod owned;
mod sales;
mod schema;
mod shutdown;
