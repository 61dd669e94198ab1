-- One integrity mechanism (docs/security.md "Every row keymgr trusts"): the row MACs of migration 0003 and the keyed
-- audit chain. The field MACs of migration 0002 (`integrity_mac` on device, user_keys, app_pins and servers) covered
-- nothing the row MACs do not, so their columns go.
--
-- A dropped column's values are still needed once, by the first open with the master key after this migration:
-- - a store stamped with row MACs (check version 3) has MACs over rows that held the column, checked under the
--   columns they were stamped with before every row is stamped anew;
-- - a store made before row MACs (check version 2) has its field MACs checked before its rows are first stamped.
-- So each value is kept in `dropped_columns` (by table, column, its position in the table and the row's rowid) until
-- that open has checked it; keymgr then empties the table in the transaction that re-stamps the rows. Nothing else
-- reads it, and an edit of it can only make that one check fail.

CREATE TABLE dropped_columns (
    table_name  TEXT    NOT NULL,
    column_name TEXT    NOT NULL,
    position    INTEGER NOT NULL,
    row_id      INTEGER NOT NULL,
    value       BLOB,
    PRIMARY KEY (table_name, column_name, row_id)
);

INSERT INTO dropped_columns (table_name, column_name, position, row_id, value)
    SELECT 'device', 'integrity_mac', (SELECT cid FROM pragma_table_info('device') WHERE name = 'integrity_mac'),
           rowid, integrity_mac FROM device;
INSERT INTO dropped_columns (table_name, column_name, position, row_id, value)
    SELECT 'user_keys', 'integrity_mac', (SELECT cid FROM pragma_table_info('user_keys') WHERE name = 'integrity_mac'),
           rowid, integrity_mac FROM user_keys;
INSERT INTO dropped_columns (table_name, column_name, position, row_id, value)
    SELECT 'app_pins', 'integrity_mac', (SELECT cid FROM pragma_table_info('app_pins') WHERE name = 'integrity_mac'),
           rowid, integrity_mac FROM app_pins;
INSERT INTO dropped_columns (table_name, column_name, position, row_id, value)
    SELECT 'servers', 'integrity_mac', (SELECT cid FROM pragma_table_info('servers') WHERE name = 'integrity_mac'),
           rowid, integrity_mac FROM servers;

ALTER TABLE device DROP COLUMN integrity_mac;
ALTER TABLE user_keys DROP COLUMN integrity_mac;
ALTER TABLE app_pins DROP COLUMN integrity_mac;
ALTER TABLE servers DROP COLUMN integrity_mac;
