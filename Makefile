# Thin wrappers around scripts/. Run `make` for the list.
.PHONY: help services down status test demo bench chaos
.DEFAULT_GOAL := help

help:
	@echo "make services   start Redis (127.0.0.1:6390) and PostgreSQL (127.0.0.1:5440) under .run/"
	@echo "                (WITH=zookeeper,etcd also ZooKeeper :2191 and etcd :2389 for lockkit's zk:// and etcd://)"
	@echo "make down       stop them"
	@echo "make status     show what is running"
	@echo "make test       start services, run all tests (nextest + doctests), stop services"
	@echo "make demo       three acts on two seckill instances, live: no lock oversells; owned-shards sells"
	@echo "                10000 units exactly; the same through a delayed batch and a frozen instance"
	@echo "                (fence rejections), with the unfenced control overselling; a sale page to watch"
	@echo "                (KEEP_SERVICES=1 leaves the services running after test/demo)"
	@echo "make bench      compare stock strategies, ceilings, lockkit vs peers -> loadtest/results/"
	@echo "                (scripts/bench.sh --smoke: the quick correctness-only check)"
	@echo "make chaos      fault injection (own Redis :6391, PostgreSQL :5441) -> loadtest/results/chaos-latest.*"
	@echo "                (scripts/chaos.sh --bounded: every scenario shortened, as make test runs it)"

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
