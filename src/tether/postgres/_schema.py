"""The PostgreSQL store's tables and statements, and how the schema is created and migrated.

Tables (in the store's own schema, ``tether`` by default)::

    meta    (key, value)                       schema_version
    runs    (run_id, status, next_seq,         one row per run; status is 'active' until the run
             owner, epoch, expires_at, ...)    finishes; owner/epoch/expires_at are the lease
    events  (run_id, seq, payload)             PRIMARY KEY (run_id, seq); payload = msgspec bytes
                                               (written only through the run's row: no FK)
    inbox   (id, run_id, payload)              answers for a run another worker holds
    blobs   (digest, data, summary)            large tool results, content-addressed
    workers (key, data, expires_at)            what each live worker can run (renewed)

Every lease time is the database's ``now()``: workers' clocks never decide who owns a run.
"""

from __future__ import annotations

import hashlib
import logging
import re
from typing import TYPE_CHECKING, Any

from .._errors import StoreSchemaError

if TYPE_CHECKING:
    import asyncpg

log = logging.getLogger("tether.postgres")

SCHEMA_VERSION = 3

_IDENT = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def check_schema_name(name: str) -> str:
    if not _IDENT.fullmatch(name):
        raise ValueError(
            f"schema name {name!r}: use lowercase letters, digits and '_' (at most 63, "
            "not starting with a digit)"
        )
    return name


MIGRATIONS: dict[int, str] = {
    1: """
CREATE TABLE {s}.runs (
    run_id     text PRIMARY KEY,
    status     text NOT NULL DEFAULT 'active',
    next_seq   bigint NOT NULL DEFAULT 0,
    owner      text,
    epoch      bigint NOT NULL DEFAULT 0,
    expires_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX runs_active ON {s}.runs (run_id) WHERE status = 'active';
CREATE TABLE {s}.events (
    run_id  text NOT NULL REFERENCES {s}.runs ON DELETE CASCADE,
    seq     bigint NOT NULL,
    payload bytea NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE {s}.inbox (
    id      bigserial PRIMARY KEY,
    run_id  text NOT NULL REFERENCES {s}.runs ON DELETE CASCADE,
    payload bytea NOT NULL
);
CREATE INDEX inbox_run ON {s}.inbox (run_id, id);
CREATE TABLE {s}.blobs (
    digest     text PRIMARY KEY,
    data       bytea NOT NULL,
    summary    text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now()
);
""",
    # Appends lock and update the run's row in the same statement as the insert, so the
    # foreign key's per-row check on ``runs`` (about 8% of an append) proves nothing more;
    # removing a run now deletes its events explicitly.
    2: """
ALTER TABLE {s}.events DROP CONSTRAINT IF EXISTS events_run_id_fkey;
""",
    # What each live worker can run (``supervisor._fleet``), renewed with its leases.
    3: """
CREATE TABLE {s}.workers (
    key        text PRIMARY KEY,
    data       bytea NOT NULL,
    expires_at timestamptz NOT NULL
);
""",
}


class Sql:
    """The statements of one schema, formatted once."""

    def __init__(self, schema: str) -> None:
        s = check_schema_name(schema)
        self.schema = s
        channel = f"tether_{s}"
        if len(channel) > 63:  # PostgreSQL's identifier limit (pg_notify refuses longer names)
            channel = "tether_" + hashlib.sha256(s.encode()).hexdigest()[:32]
        self.channel = channel
        self.create_schema = f"CREATE SCHEMA IF NOT EXISTS {s}"
        self.create_meta = (
            f"CREATE TABLE IF NOT EXISTS {s}.meta (key text PRIMARY KEY, value text NOT NULL)"
        )
        self.migration_lock = "SELECT pg_advisory_xact_lock(hashtext($1))"
        self.get_version = f"SELECT value FROM {s}.meta WHERE key = 'schema_version'"
        self.set_version = (
            f"INSERT INTO {s}.meta (key, value) VALUES ('schema_version', $1) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
        )
        self.migrations = {v: sql.format(s=s) for v, sql in MIGRATIONS.items()}

        # A new run, owned by its creator (epoch 1) until it releases it, with its first
        # events: one statement. Nothing is inserted if the run exists.
        self.create_run = (
            f"INSERT INTO {s}.runs (run_id, owner, epoch, expires_at, next_seq, status) "
            "VALUES ($1, $2, 1, now() + make_interval(secs => $3), 0, 'active') "
            "ON CONFLICT (run_id) DO NOTHING RETURNING epoch"
        )
        self.create_run_with_events = (
            f"WITH run AS (INSERT INTO {s}.runs "
            "(run_id, owner, epoch, expires_at, next_seq, status) "
            "VALUES ($1, $2, 1, now() + make_interval(secs => $3), cardinality($4::bytea[]), "
            "coalesce($5, 'active')) ON CONFLICT (run_id) DO NOTHING RETURNING run_id) "
            f"INSERT INTO {s}.events (run_id, seq, payload) "
            "SELECT run.run_id, t.ord - 1, t.p FROM run, unnest($4::bytea[]) WITH ORDINALITY "
            "AS t(p, ord)"
        )
        # Claim: one conditional statement. Free (no owner, or the lease expired by the
        # database's clock) -> the epoch rises by one and the caller owns the run.
        # It also says who held it before, if a lease ran out (for the person who answers
        # an escalation: that worker may only be paused, its call still running).
        self.claim = (
            f"UPDATE {s}.runs AS r SET owner = $2, epoch = r.epoch + 1, "
            "expires_at = now() + make_interval(secs => $3) "
            f"FROM (SELECT owner, expires_at FROM {s}.runs WHERE run_id = $1) AS before "
            "WHERE r.run_id = $1 "
            "AND (r.owner IS NULL OR r.expires_at <= now() OR r.owner = $2) "
            "RETURNING r.epoch, before.owner, extract(epoch FROM before.expires_at)::float8"
        )
        # The fenced append: the row update (which takes the run's row lock and re-checks the
        # epoch against the newest committed row) and the insert are one statement; a stale
        # epoch or an unexpected seq inserts nothing. PRIMARY KEY (run_id, seq) backs it up.
        self.append = (
            f"WITH lease AS (UPDATE {s}.runs SET next_seq = $4 + cardinality($5::bytea[]), "
            "updated_at = now(), status = coalesce($6, status) "
            "WHERE run_id = $1 AND epoch = $2 AND owner = $3 AND next_seq = $4 "
            "RETURNING run_id) "
            f"INSERT INTO {s}.events (run_id, seq, payload) "
            "SELECT lease.run_id, $4 + t.ord - 1, t.p "
            "FROM lease, unnest($5::bytea[]) WITH ORDINALITY AS t(p, ord)"
        )
        self.lease_of = f"SELECT owner, epoch, next_seq FROM {s}.runs WHERE run_id = $1"
        self.renew = (
            f"UPDATE {s}.runs AS r SET expires_at = now() + make_interval(secs => $2) "
            "FROM unnest($3::text[], $4::bigint[]) AS h(run_id, epoch) "
            "WHERE r.run_id = h.run_id AND r.epoch = h.epoch AND r.owner = $1 "
            "RETURNING r.run_id"
        )
        # Give a run up, and wake the other workers if ``$4`` (an answer was recorded) or
        # answers wait in its inbox (posted after the holder last looked): one statement.
        self.release = (
            f"WITH r AS (UPDATE {s}.runs SET owner = NULL, expires_at = NULL "
            "WHERE run_id = $1 AND epoch = $2 AND owner = $3 RETURNING run_id) "
            f"SELECT pg_notify('{self.channel}', r.run_id) FROM r "
            f"WHERE $4 OR EXISTS (SELECT 1 FROM {s}.inbox i WHERE i.run_id = r.run_id)"
        )
        self.holder = (
            f"SELECT owner FROM {s}.runs WHERE run_id = $1 AND owner IS NOT NULL "
            "AND expires_at > now()"
        )
        self.notify = "SELECT pg_notify($1, $2)"
        # End a server process of ours whose statement's outcome is unknown, waiting up to 5 s.
        self.terminate = (
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE pid = $1"
        )
        self.read = f"SELECT seq, payload FROM {s}.events WHERE run_id = $1 ORDER BY seq"
        self.read_range = (
            f"SELECT seq, payload FROM {s}.events WHERE run_id = $1 AND seq >= $2 AND seq < $3 "
            "ORDER BY seq"
        )
        self.exists = f"SELECT 1 FROM {s}.runs WHERE run_id = $1"
        self.delete_run = (
            f"WITH gone AS (DELETE FROM {s}.runs WHERE run_id = $1 "
            "AND (owner IS NULL OR expires_at <= now()) RETURNING run_id), "
            f"events AS (DELETE FROM {s}.events WHERE run_id IN (SELECT run_id FROM gone)) "
            "SELECT run_id FROM gone"
        )
        self.list_runs = f"SELECT run_id FROM {s}.runs ORDER BY run_id"
        # Runs a sweep of owner $1 should look at: unfinished, and free, expired or its own.
        self.run_stats = (
            f"SELECT r.run_id, r.next_seq, r.epoch, "
            f"EXISTS (SELECT 1 FROM {s}.inbox i WHERE i.run_id = r.run_id) "
            f"FROM {s}.runs r WHERE r.status = 'active' "
            "AND (r.owner IS NULL OR r.owner = $1 OR r.expires_at <= now())"
        )
        # Every run's version and live holder, for listings that read only what changed.
        self.run_versions = (
            f"SELECT run_id, next_seq, epoch, CASE WHEN owner IS NOT NULL AND expires_at > now() "
            f"THEN owner END, (SELECT max(i.id) FROM {s}.inbox i WHERE i.run_id = r.run_id) "
            f"FROM {s}.runs r"
        )
        self.read_many = (
            f"SELECT run_id, seq, payload FROM {s}.events WHERE run_id = ANY($1::text[]) "
            "ORDER BY run_id, seq"
        )
        self.has_inbox = f"SELECT EXISTS (SELECT 1 FROM {s}.inbox WHERE run_id = $1)"
        # The lock of a run's inbox (its key: ``inbox_key``), held to the end of the
        # transaction: a checked post, and an answer appended by the journal's holder, take
        # it, so that each is judged with the other.
        self.lock_inbox = "SELECT pg_try_advisory_xact_lock(hashtext($1))"
        self.post = f"INSERT INTO {s}.inbox (run_id, payload) VALUES ($1, $2)"
        self.take_inbox = f"SELECT id, payload FROM {s}.inbox WHERE run_id = $1 ORDER BY id"
        self.advertise = (
            f"INSERT INTO {s}.workers (key, data, expires_at) "
            "VALUES ($1, $2, now() + make_interval(secs => $3)) "
            "ON CONFLICT (key) DO UPDATE SET data = $2, expires_at = excluded.expires_at"
        )
        self.withdraw = (
            f"DELETE FROM {s}.workers WHERE key = $1 OR expires_at < now() - interval '1 hour'"
        )
        self.advertised = f"SELECT key, data FROM {s}.workers WHERE expires_at > now()"
        self.renew_adverts = (
            f"UPDATE {s}.workers SET expires_at = now() + make_interval(secs => $2) "
            "WHERE key = ANY($1::text[])"
        )
        self.inbox_versions = (
            f"SELECT run_id, max(id) FROM {s}.inbox WHERE run_id = ANY($1::text[]) GROUP BY run_id"
        )
        # Only while the clearing worker still holds the run: a worker that lost its lease
        # unawares must not drop answers meant for the new owner.
        self.clear_inbox = (
            f"DELETE FROM {s}.inbox WHERE id = ANY($1::bigint[]) AND EXISTS "
            f"(SELECT 1 FROM {s}.runs WHERE run_id = $2 AND owner = $3 AND epoch = $4)"
        )
        self.put_blob = (
            f"INSERT INTO {s}.blobs (digest, data, summary) VALUES ($1, $2, $3) "
            "ON CONFLICT (digest) DO NOTHING"
        )
        self.get_blob = f"SELECT data FROM {s}.blobs WHERE digest = $1"

    def inbox_key(self, run_id: str) -> str:
        """What ``lock_inbox`` locks for run ``run_id``'s inbox (one key space per schema)."""
        return f"{self.schema}:inbox:{run_id}"


async def migrate(pool: asyncpg.Pool[Any], sql: Sql, where: str) -> None:
    """Create the schema, or bring it to ``SCHEMA_VERSION``; refuse a newer one. ``where``
    names the database in messages."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(sql.migration_lock, f"tether-schema-{sql.schema}")
        await conn.execute(sql.create_schema)
        await conn.execute(sql.create_meta)
        value = await conn.fetchval(sql.get_version)
        current = int(value) if value is not None else 0
        if current > SCHEMA_VERSION:
            raise StoreSchemaError(
                f"{where} schema {sql.schema!r} is at version {current}; this "
                f"tether knows up to {SCHEMA_VERSION}: upgrade tether"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            await conn.execute(sql.migrations[version])
            await conn.execute(sql.set_version, str(version))
            log.info("schema %s migrated to version %d", sql.schema, version)


async def check_schema(pool: asyncpg.Pool[Any], sql: Sql, where: str) -> None:
    """Refuse a missing schema, or one at another version (a store opened with
    ``create=False``); change nothing."""
    where = f"{where} schema {sql.schema!r}"
    exists = await pool.fetchval("SELECT to_regclass($1)", f"{sql.schema}.meta")
    if exists is None:
        raise StoreSchemaError(f"{where} holds no tether store (is the schema name right?)")
    value = await pool.fetchval(sql.get_version)
    current = int(value) if value is not None else 0
    if current != SCHEMA_VERSION:
        raise StoreSchemaError(
            f"{where} is at version {current}; this tether uses {SCHEMA_VERSION}: "
            + ("upgrade tether" if current > SCHEMA_VERSION else "start a worker to migrate it")
        )
