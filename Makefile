# Thin wrappers around scripts/. Run `make` for the list.
.PHONY: help services down status test demo
.DEFAULT_GOAL := help

help:
	@echo "make services   start Redis (127.0.0.1:6390) and PostgreSQL (127.0.0.1:5440) under .run/"
	@echo "make down       stop them"
	@echo "make status     show what is running"
	@echo "make test       start services, run all tests (nextest + doctests), stop services"
	@echo "make demo       start services, run the lockkit demo, stop services"
	@echo "                (KEEP_SERVICES=1 leaves the services running after test/demo)"

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
