-- Key backends (docs/architecture.md "Key backends"): where each key's private half lives, and the TPM the store uses.
-- A store made before this migration is a software store: every key and the device say 'software'.

-- Chosen at `init --key-backend software|tpm|auto`; covered by the device row's MAC when not 'software'.
ALTER TABLE device ADD COLUMN key_backend TEXT NOT NULL DEFAULT 'software' CHECK (key_backend IN ('software', 'tpm'));
-- Why `init` chose it (under `auto`: the TPM answered, or why it did not), for `status`.
ALTER TABLE device ADD COLUMN key_backend_reason TEXT;
-- The pinned TCTI (e.g. device:/dev/tpmrm0): keymgr never lets libtss2 choose one.
ALTER TABLE device ADD COLUMN tpm_tcti TEXT;
-- Sealed under the master key: the rollback counter's authValue (32 bytes), then the TPM's lockoutAuth keymgr set
-- at init (32 bytes; absent when keymgr does not hold it).
ALTER TABLE device ADD COLUMN tpm_secrets BLOB;
-- Rollback detection: the NV index of this store's TPM counter (nt=counter), and the value the last commit saw. A
-- store more than one step behind the counter is refused (`rolledBack`).
ALTER TABLE device ADD COLUMN tpm_counter_index INTEGER;
ALTER TABLE device ADD COLUMN rollback_counter INTEGER;

-- Where this key's private half lives; its wrapped_private_key is then the TPM-wrapped blob, sealed under the master key.
ALTER TABLE user_keys ADD COLUMN key_backend TEXT NOT NULL DEFAULT 'software' CHECK (key_backend IN ('software', 'tpm'));
