-- Integrity of every row (docs/security.md "Every row keymgr trusts"): each table keymgr reads to decide something
-- gets a `row_mac`, an HMAC-SHA256 under a master-key-derived key over the table name and every other column of the
-- row (its primary key included), in a canonical encoding Storage builds from the row itself. A column added later
-- is covered without code. The set of rows of each table is committed too: `device.row_sets` holds, per table, the
-- row count and an XOR of secret per-row tags, with the columns it was stamped over; the device row's own `row_mac`
-- covers it, so deleting a row, or re-inserting a deleted one, shows in `keymgr audit verify`.
--
-- Rows of a store made before this migration have NULL MACs until keymgr first opens the store with its master key:
-- it stamps every row in one transaction and re-seals the master key check as version 3. From then on a NULL MAC is
-- tampering. A later migration that adds a table keymgr trusts gives it a `row_mac BLOB` column; one that adds a
-- column needs nothing: keymgr re-stamps once when the schema version is newer than the one `row_sets` records.

ALTER TABLE device ADD COLUMN row_sets TEXT;
ALTER TABLE device ADD COLUMN row_mac BLOB;
ALTER TABLE users ADD COLUMN row_mac BLOB;
ALTER TABLE user_keys ADD COLUMN row_mac BLOB;
ALTER TABLE app_pins ADD COLUMN row_mac BLOB;
ALTER TABLE servers ADD COLUMN row_mac BLOB;
ALTER TABLE registrations ADD COLUMN row_mac BLOB;
ALTER TABLE tokens ADD COLUMN row_mac BLOB;
ALTER TABLE sync_state ADD COLUMN row_mac BLOB;
