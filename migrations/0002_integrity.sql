-- Integrity of what is not secret but decides security (DESIGN.md "Integrity of what is not secret").
-- Every *_mac column is an HMAC-SHA256 under a key derived from the master key: a database writer without the master
-- key cannot change the gated fields consistently. Rows of a store made before this migration have NULL MACs until
-- keymgr first opens the store with its master key: it stamps every row in one transaction and re-seals the master key
-- check as version 2. From then on a NULL MAC is tampering, never "not stamped yet".

-- The device row: verifier commands, Argon2 parameters, PIN policy, issuer.
ALTER TABLE device ADD COLUMN integrity_mac BLOB;
-- The audit anchor: the newest audit entry's seq and MAC, MAC'd, so cutting entries off the end shows.
ALTER TABLE device ADD COLUMN audit_anchor_seq INTEGER;
ALTER TABLE device ADD COLUMN audit_anchor_mac BLOB;

-- A key's owner, issuer, auth type, status and sealed private key.
ALTER TABLE user_keys ADD COLUMN integrity_mac BLOB;

-- A PIN record's Argon2 parameters, salt, verifier, failure counter and retry limit.
ALTER TABLE app_pins ADD COLUMN integrity_mac BLOB;

-- Every server profile; plain http:// to anything but loopback needs `server set --allow-insecure-http`.
ALTER TABLE servers ADD COLUMN allow_insecure_http INTEGER NOT NULL DEFAULT 0 CHECK (allow_insecure_http IN (0, 1));
ALTER TABLE servers ADD COLUMN integrity_mac BLOB;

-- The keyed audit chain: mac = HMAC-SHA256(auditKey, prevMac || canonical entry), beside the SHA-256 chain.
ALTER TABLE audit_events ADD COLUMN mac TEXT;
-- Entries stay append-only; only the keyed MAC may be (re)written: when an old store is stamped, and when
-- `master rotate` re-keys the chain.
DROP TRIGGER audit_events_append_only_update;
CREATE TRIGGER audit_events_append_only_update
BEFORE UPDATE OF seq, at, event, user_id, kid, actor, details, prev_hash, hash ON audit_events
BEGIN
    SELECT RAISE(ABORT, 'audit_events is append-only');
END;
