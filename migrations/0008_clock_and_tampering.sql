-- Two things keymgr learns at run time and keeps: a server clock offset, and a tampering finding.

-- What keymgr learned of each server's clock from the `Date` header of its answers: seconds the server is ahead of
-- this device (negative: behind), NULL or 0 when no skew is known. DPoP proofs' `iat` and `keymgr status` use it.
-- A new column: every row's MAC covers it (the store restamps its row sets for the new schema, as after any
-- migration).
ALTER TABLE servers ADD COLUMN clock_offset_seconds INTEGER;

-- The first tampering a command found (a row whose MAC did not hold), as JSON {"what","at","userId"} (userId null
-- when the row names no user): until an administrator clears it (`keymgr audit clear-tampering`, once `audit verify`
-- is clean), no secret of that user (of every user, when null) is released. In the device row, under its row MAC.
ALTER TABLE device ADD COLUMN tampering TEXT;
