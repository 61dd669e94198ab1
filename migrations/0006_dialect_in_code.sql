-- The server dialect is validated in code (KeyManager's DialectName and its ServerDialect implementations), no longer
-- by a CHECK constraint: a new dialect is then one file in Sources/KeyManager/Dialects, not a table rebuild per
-- dialect. This one rebuild drops the constraint; every column, value and rowid is kept, in the same order, so each
-- row's MAC still covers exactly what it covered (the store restamps its row sets for the new schema as after any
-- migration). Foreign keys are off while a migration runs and checked before it commits (Store.migrate), so the
-- registrations and tokens that reference servers(name) keep their rows.
CREATE TABLE servers_new (
    name                            TEXT PRIMARY KEY NOT NULL,
    dialect                         TEXT NOT NULL,
    base_url                        TEXT NOT NULL,
    realm_path                      TEXT NOT NULL DEFAULT '/realms/root',
    credential_file                 TEXT,
    credential_header               TEXT NOT NULL DEFAULT 'Authorization',
    token_endpoint                  TEXT,
    registration_endpoint           TEXT,
    revocation_endpoint             TEXT,
    device_authorization_endpoint   TEXT,
    token_binding                   TEXT NOT NULL DEFAULT 'bound' CHECK (token_binding IN ('bound', 'unbound')),
    updated_at                      TEXT NOT NULL,
    allow_insecure_http             INTEGER NOT NULL DEFAULT 0 CHECK (allow_insecure_http IN (0, 1)),
    integrity_mac                   BLOB,
    row_mac                         BLOB
);
INSERT INTO servers_new (rowid, name, dialect, base_url, realm_path, credential_file, credential_header, token_endpoint,
                         registration_endpoint, revocation_endpoint, device_authorization_endpoint, token_binding,
                         updated_at, allow_insecure_http, integrity_mac, row_mac)
    SELECT rowid, name, dialect, base_url, realm_path, credential_file, credential_header, token_endpoint,
           registration_endpoint, revocation_endpoint, device_authorization_endpoint, token_binding,
           updated_at, allow_insecure_http, integrity_mac, row_mac
    FROM servers;
DROP TABLE servers;
ALTER TABLE servers_new RENAME TO servers;
