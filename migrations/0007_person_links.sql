-- People and identities (docs/data-model.md "person_links"): a person is an OS account on the device (uid and login
-- name, as the kernel reports the caller); an identity user is the server's user. A link says which person owns an
-- identity user: the agent's `for = "self"` is the caller's linked identity users, never a name that matches.
-- One owner per identity user (the primary key); a person may own several. A link is made by an administrator
-- (`keymgr person link`), by a person binding an identity user nobody had, or, once, when a store made before this
-- migration is first opened with its master key (an identity whose user id, id= value or username is an existing
-- login). Covered by the row MACs like every table keymgr trusts.
CREATE TABLE person_links (
    user_id     TEXT PRIMARY KEY NOT NULL REFERENCES users(user_id),
    uid         INTEGER NOT NULL CHECK (uid >= 0),
    login       TEXT NOT NULL,
    -- How the link was made: 'administrator', 'bind' (the person bound a new identity) or 'migrated'.
    linked_by   TEXT NOT NULL CHECK (linked_by IN ('administrator', 'bind', 'migrated')),
    created_at  TEXT NOT NULL,
    row_mac     BLOB
);
CREATE INDEX person_links_by_uid ON person_links (uid, user_id);
