-- Bounded logs (`keymgr audit archive`, docs/operations.md "Retention"): archived entries are removed from the front
-- of the audit log, and the newest of them stays as the log's base, so the chain still verifies from there.
-- The base: the last archived entry's seq, hash and keyed MAC, and a MAC over the three under the audit key (like the
-- tail anchor). The device row's own MAC covers these columns too.
ALTER TABLE device ADD COLUMN audit_base_seq INTEGER;
ALTER TABLE device ADD COLUMN audit_base_hash TEXT;
ALTER TABLE device ADD COLUMN audit_base_mac TEXT;
ALTER TABLE device ADD COLUMN audit_base_anchor BLOB;

-- Entries stay append-only, except those at or below the base, which `audit archive` removes in the transaction
-- that sets it.
DROP TRIGGER audit_events_append_only_delete;
CREATE TRIGGER audit_events_append_only_delete BEFORE DELETE ON audit_events
WHEN OLD.seq > COALESCE((SELECT audit_base_seq FROM device WHERE id = 1), 0)
BEGIN
    SELECT RAISE(ABORT, 'audit_events is append-only');
END;
