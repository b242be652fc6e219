"""Each host's story in Redis, one for every worker of the namespace: its rate (DOMAIN_RATE_LIMIT) and its
breaker (hosts/breakers.py tells the states and steps; hosts/rates.py the arithmetic); its render="auto" choice
(hosts/render_choices.py).

Keys (redis_keys.py): rate:<host>, breaker:<host>, breakers, render_choices.
"""
from typing import Optional

from ...hosts.breakers import FIELDS as BREAKER_FIELDS, KEPT_HOSTS, RECORD_TTL, STEPS as BREAKER_STEPS, state_of
from ...hosts.render_choices import KEPT_HOSTS as KEPT_CHOICES, RenderChoice, choice_step
from .lua_scripts import LuaScript
from .redis_port import RedisPort, translated


class RedisHostRates(RedisPort):
    """The HostRates port: one key per host, its next theoretical arrival."""

    _book = LuaScript("book_host_rate")

    @translated
    def reserve(self, host: str, per_second: float, burst: int) -> float:
        interval_ms = 1000.0 / per_second
        waited_ms = self._book(keys=[self.keys.rate(host)], args=[interval_ms, (burst - 1) * interval_ms])
        return max(0.0, float(waited_ms) / 1000)


class RedisHostBreakers(RedisPort):
    """The HostBreakers port: a hash per host with a breaker record, an index of them for display."""

    _step = LuaScript("step_host_breaker")

    @translated
    def step(self, host: str, step: str, now: float, arg=None) -> tuple:
        if step not in BREAKER_STEPS:
            raise ValueError(f"no breaker step {step!r}")
        args = [step, repr(now)] + [repr(a) if isinstance(a, float) else a for a in
                                    (arg if isinstance(arg, tuple) else () if arg is None else (arg,))]
        reply = self._step(keys=[self.keys.breaker(host), self.keys.breakers],
                           args=args + [KEPT_HOSTS, int(RECORD_TTL), host])
        return _breaker_state(reply[1:]), int(reply[0])

    @translated
    def look(self, host: str):
        return _breaker_state(self.redis.hmget(self.keys.breaker(host), *BREAKER_FIELDS))

    @translated
    def close(self, host: str) -> None:
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.delete(self.keys.breaker(host))
            pipe.zrem(self.keys.breakers, host)
            pipe.execute()

    @translated
    def states(self, limit: int = 20) -> dict:
        hosts = [host.decode() for host in self.redis.zrevrange(self.keys.breakers, 0, max(0, limit - 1))]
        with self.redis.pipeline(transaction=False) as pipe:
            for host in hosts:
                pipe.hmget(self.keys.breaker(host), *BREAKER_FIELDS)
            records = pipe.execute()
        shown = {host: _breaker_state(record) for host, record in zip(hosts, records)}
        return {host: state for host, state in shown.items() if state is not None}     # (expired records)


def _breaker_state(values):
    """The BreakerState of a record's FIELDS as Redis gave them (all None or none: no record)."""
    if not values or values[0] is None:
        return None
    return state_of({name: (v.decode() if isinstance(v, bytes) else v) for name, v in zip(BREAKER_FIELDS, values)})


class RedisRenderChoices(RedisPort):
    """The RenderChoices port: one hash, host -> the record's JSON. A step is choice_step between a WATCH and a
    MULTI (the state machine stays in one place, in Python): a step that races another's is run again."""

    @translated
    def choice(self, host: str) -> Optional[RenderChoice]:
        kept = self.redis.hget(self.keys.render_choices, host)
        return RenderChoice.from_json(kept) if kept is not None else None

    @translated
    def step(self, host: str, step: str, now: float, batch: Optional[int], why: str, sample_size: int) -> tuple:
        key = self.keys.render_choices

        def apply(pipe) -> tuple:
            kept = pipe.hget(key, host)
            if kept is None and pipe.hlen(key) >= KEPT_CHOICES:
                return None, False
            record, changed = choice_step(RenderChoice.from_json(kept) if kept is not None else None, step, now,
                                          batch, why, sample_size)
            pipe.multi()
            if record is not None:
                pipe.hset(key, host, record.to_json())
            return record, changed

        return self.redis.transaction(apply, key, value_from_callable=True)

    @translated
    def choices(self, limit: int = 1000) -> dict:
        records = {host.decode(): RenderChoice.from_json(text)
                   for host, text in self.redis.hgetall(self.keys.render_choices).items()}
        return dict(sorted(records.items(), key=lambda item: item[1].since, reverse=True)[:limit])
