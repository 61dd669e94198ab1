-- Wrong PINs per calling OS account (issue 32): a shared account (a kiosk) must not spend every person's PIN attempts,
-- nor a TPM's dictionary-attack counter, in a minute. One row per uid that guessed another person's PIN and got it
-- wrong: how many wrong PINs in the current 10-minute window, until when the next attempt waits, and how long the
-- next wait is (it doubles). Covered by the row MACs like every table (row_mac); each request is its own process, so
-- the state lives here.
CREATE TABLE pin_throttle (
    uid                 INTEGER PRIMARY KEY NOT NULL CHECK (uid >= 0),
    login               TEXT NOT NULL,
    failures            INTEGER NOT NULL DEFAULT 0 CHECK (failures >= 0),
    window_started_at   TEXT NOT NULL,
    last_failure_at     TEXT,
    blocked_until       TEXT,
    wait_seconds        INTEGER NOT NULL CHECK (wait_seconds > 0),
    updated_at          TEXT NOT NULL,
    row_mac             BLOB
);
