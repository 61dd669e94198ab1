-- keymgr's initial schema: every table of DESIGN.md's data model.
-- Timestamps are ISO 8601 UTC text with milliseconds ('2026-11-23T10:00:00.000Z'), so text order is time order.
-- Secrets are stored only as sealed blobs (AES-256-GCM under a master-key-derived key); Storage cannot read them.

-- The one device this store lives on, and the store's settings.
CREATE TABLE device (
    id                          INTEGER PRIMARY KEY CHECK (id = 1),
    device_id                   TEXT    NOT NULL,
    device_name                 TEXT    NOT NULL,
    os_name                     TEXT    NOT NULL,
    os_version                  TEXT    NOT NULL,
    model                       TEXT    NOT NULL,
    issuer                      TEXT    NOT NULL,
    pin_retry                   INTEGER NOT NULL CHECK (pin_retry BETWEEN 1 AND 10),
    pin_min_length              INTEGER NOT NULL CHECK (pin_min_length BETWEEN 4 AND 64),
    argon2_memory_kib           INTEGER NOT NULL CHECK (argon2_memory_kib >= 8),
    argon2_iterations           INTEGER NOT NULL CHECK (argon2_iterations >= 1),
    argon2_parallelism          INTEGER NOT NULL CHECK (argon2_parallelism >= 1),
    biometric_verifier          TEXT,   -- JSON array: argv of the biometric verifier command
    credential_verifier         TEXT,   -- JSON array: argv of the device-credential verifier command
    master_key_check            BLOB    NOT NULL,  -- a sealed known value: tells a wrong master key from a damaged row
    created_at                  TEXT    NOT NULL
);

CREATE TABLE users (
    user_id     TEXT PRIMARY KEY NOT NULL,
    username    TEXT,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);

CREATE TABLE user_keys (
    kid                     TEXT PRIMARY KEY NOT NULL,
    user_id                 TEXT NOT NULL REFERENCES users(user_id),
    issuer                  TEXT NOT NULL,
    auth_type               TEXT NOT NULL CHECK (auth_type IN ('NONE', 'APPLICATION_PIN', 'BIOMETRIC_ONLY', 'BIOMETRIC_ALLOW_FALLBACK')),
    algorithm               TEXT NOT NULL DEFAULT 'ES256' CHECK (algorithm = 'ES256'),
    public_jwk              TEXT NOT NULL,
    wrapped_private_key     BLOB,   -- NULL once the key material is destroyed
    status                  TEXT NOT NULL CHECK (status IN ('active', 'locked', 'revoked', 'superseded')),
    server_state            TEXT NOT NULL DEFAULT 'unregistered'
                                 CHECK (server_state IN ('unregistered', 'registered', 'pendingDeletion', 'deleted')),
    device_name             TEXT,   -- as the server knows this binding
    server_last_access_at   TEXT,
    created_at              TEXT NOT NULL,
    last_used_at            TEXT,
    revoked_at              TEXT,
    revoke_reason           TEXT,
    CHECK (status IN ('active', 'locked') OR wrapped_private_key IS NULL)
);
CREATE INDEX user_keys_by_user ON user_keys(user_id, status);
CREATE INDEX user_keys_by_server_state ON user_keys(server_state);
-- One usable key per user and issuer: bind retires the previous one in the same transaction.
CREATE UNIQUE INDEX user_keys_one_usable_per_issuer ON user_keys(user_id, issuer) WHERE status IN ('active', 'locked');

CREATE TABLE app_pins (
    kid                 TEXT PRIMARY KEY NOT NULL REFERENCES user_keys(kid) ON DELETE CASCADE,
    argon2_memory_kib   INTEGER NOT NULL,
    argon2_iterations   INTEGER NOT NULL,
    argon2_parallelism  INTEGER NOT NULL,
    salt                BLOB    NOT NULL,
    verifier            BLOB    NOT NULL,   -- HKDF of Argon2id(PIN) with a master-key-derived pepper
    failed_attempts     INTEGER NOT NULL DEFAULT 0 CHECK (failed_attempts >= 0),
    pin_retry           INTEGER NOT NULL CHECK (pin_retry >= 1),
    updated_at          TEXT    NOT NULL
);

-- Server profiles: settings, never secrets (the admin credential stays in a file or $CREDENTIALS_DIRECTORY).
CREATE TABLE servers (
    name                            TEXT PRIMARY KEY NOT NULL,
    dialect                         TEXT NOT NULL CHECK (dialect IN ('pingam', 'curity')),
    base_url                        TEXT NOT NULL,
    realm_path                      TEXT NOT NULL DEFAULT '/realms/root',
    credential_file                 TEXT,
    credential_header               TEXT NOT NULL DEFAULT 'Authorization',
    token_endpoint                  TEXT,
    registration_endpoint           TEXT,
    revocation_endpoint             TEXT,
    device_authorization_endpoint   TEXT,
    token_binding                   TEXT NOT NULL DEFAULT 'bound' CHECK (token_binding IN ('bound', 'unbound')),
    updated_at                      TEXT NOT NULL
);

-- RFC 7591 / 7592 registrations, one per user and server.
CREATE TABLE registrations (
    user_id                             TEXT NOT NULL REFERENCES users(user_id),
    server_name                         TEXT NOT NULL REFERENCES servers(name),
    client_id                           TEXT NOT NULL,
    sealed_client_secret                BLOB,
    sealed_registration_access_token    BLOB,
    registration_client_uri             TEXT,
    client_id_issued_at                 INTEGER,
    client_secret_expires_at            INTEGER,
    token_endpoint_auth_method          TEXT,
    grant_types                         TEXT,   -- JSON array
    scope                               TEXT,
    software_id                         TEXT,
    metadata                            TEXT NOT NULL DEFAULT '{}',  -- every other non-secret response field, JSON
    status                              TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'revoked')),
    created_at                          TEXT NOT NULL,
    updated_at                          TEXT NOT NULL,
    PRIMARY KEY (user_id, server_name)
);

-- OAuth tokens, one set per user and server, with the DPoP key they are bound to.
CREATE TABLE tokens (
    user_id                 TEXT NOT NULL REFERENCES users(user_id),
    server_name             TEXT NOT NULL REFERENCES servers(name),
    client_id               TEXT NOT NULL,
    token_type              TEXT NOT NULL CHECK (token_type IN ('DPoP', 'Bearer')),
    sealed_access_token     BLOB,
    sealed_refresh_token    BLOB,
    sealed_id_token         BLOB,
    scope                   TEXT,
    expires_at              TEXT,
    jkt                     TEXT,
    sealed_dpop_key         BLOB,
    updated_at              TEXT NOT NULL,
    PRIMARY KEY (user_id, server_name)
);

-- Append-only, hash-chained: hash = SHA-256(prev_hash || canonical event). Secrets never appear here.
CREATE TABLE audit_events (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    at          TEXT NOT NULL,
    event       TEXT NOT NULL,
    user_id     TEXT,
    kid         TEXT,
    actor       TEXT NOT NULL,
    details     TEXT NOT NULL DEFAULT '{}',
    prev_hash   TEXT NOT NULL,
    hash        TEXT NOT NULL
);
CREATE INDEX audit_events_by_user ON audit_events(user_id, seq);
CREATE TRIGGER audit_events_append_only_update BEFORE UPDATE ON audit_events
BEGIN
    SELECT RAISE(ABORT, 'audit_events is append-only');
END;
CREATE TRIGGER audit_events_append_only_delete BEFORE DELETE ON audit_events
BEGIN
    SELECT RAISE(ABORT, 'audit_events is append-only');
END;

-- Per-server results of the last sync run. The one-at-a-time guard is a file lock, not a row.
CREATE TABLE sync_state (
    server_name     TEXT PRIMARY KEY NOT NULL,
    started_at      TEXT NOT NULL,
    finished_at     TEXT,
    users           INTEGER NOT NULL DEFAULT 0,
    in_sync         INTEGER NOT NULL DEFAULT 0,
    registered      INTEGER NOT NULL DEFAULT 0,
    revoked         INTEGER NOT NULL DEFAULT 0,
    server_deleted  INTEGER NOT NULL DEFAULT 0,
    orphans         INTEGER NOT NULL DEFAULT 0,
    errors          INTEGER NOT NULL DEFAULT 0,
    error_summary   TEXT NOT NULL DEFAULT '[]'
);
