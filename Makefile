# Thin wrappers around scripts/. Run `make` for the list.
.PHONY: help services down status test demo bench chaos compose
.DEFAULT_GOAL := help

help:
	@echo "make services   start Redis (127.0.0.1:6390) and PostgreSQL (127.0.0.1:5440) under .run/"
	@echo "                (WITH=zookeeper,etcd also ZooKeeper :2191 and etcd :2389 for lockkit's zk:// and etcd://)"
	@echo "make down       stop them"
	@echo "make status     show what is running"
	@echo "make test       start services, run all tests (clippy, cargo package -p lockkit, nextest + doctests with the"
	@echo "                owned-shards model check, the bench runner's pytest, the bench smoke run, the bounded chaos"
	@echo "                suite, the bounded compose check with its pause row and control), stop services"
	@echo "make demo       starts the services, builds seckill + faultproxy (release), then three acts live on two instances:"
	@echo "                1. strategy none oversells; 2. owned-shards sells 10000 units over 20 shards exactly;"
	@echo "                3. the same sale while b's PostgreSQL traffic is held past its lease (up to three rounds,"
	@echo "                until the fence refuses a stale batch) and b is frozen (SIGSTOP), then the same fault on"
	@echo "                owned-unfenced, the control, which oversells; progress each second, a sale page (URL printed),"
	@echo "                a final table, a screenshot in loadtest/results/demo-act3.png (DEMO_ACTS=1,3 runs some acts)"
	@echo "                (KEEP_SERVICES=1 leaves the services running after test/demo)"
	@echo "make bench      compare stock strategies (throughput, p99 at 25/50/75% load), ceilings, lock backends"
	@echo "                and lockkit vs peers -> loadtest/results/latest.{json,md,svg}, latest-latency.svg"
	@echo "                (scripts/bench.sh --smoke: the quick correctness-only check)"
	@echo "make chaos      fault injection (own Redis :6391, PostgreSQL :5441) -> loadtest/results/chaos-latest.*"
	@echo "                (scripts/chaos.sh --bounded: every scenario shortened, as make test runs it)"
	@echo "make compose    docker-compose.yml for real: installs Docker if missing, builds every image (local stand-ins"
	@echo "                where none can be pulled), compose up --wait, k6 sells a 10000-unit sale through both"
	@echo "                seckill containers, audit, published ports, down -v; then the fault rows across three"
	@echo "                containers (network disconnect from PostgreSQL and from Redis, pause, kill, the unfenced"
	@echo "                control) (docs/docker.md; scripts/compose.sh --bounded: tighter limits, shorter sale,"
	@echo "                the pause row and its control)"

services:
	bash scripts/services.sh up

down:
	bash scripts/services.sh down

status:
	bash scripts/services.sh status

test:
	bash scripts/test.sh

demo:
	bash scripts/demo.sh

bench: ; bash scripts/bench.sh

chaos:
	bash scripts/chaos.sh

compose:
	bash scripts/compose.sh
