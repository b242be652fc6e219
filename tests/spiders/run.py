"""Run a spider class in one role: `run.py module:Class master|master-once|worker|worker-once`.

master = start_monitor(), master-once = start_monitor(once=True), worker = keep_alive worker,
worker-once = keep_alive=False worker. Settings come from BATCHD_* in the environment.
"""
import importlib
import sys

target, role = sys.argv[1:3]
module_name, class_name = target.split(":")
spider_cls = getattr(importlib.import_module(module_name), class_name)
if role == "master":
    spider_cls().start_monitor()
elif role == "master-once":
    spider_cls().start_monitor(once=True)
elif role in ("worker", "worker-once"):
    spider_cls(keep_alive=role == "worker").start()
else:
    sys.exit(f"unknown role {role!r}")
