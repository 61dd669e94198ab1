extension KeyManager {
    /// The TPM's dictionary-attack counter and limits (`tpm status`).
    /// - Throws: `usage` for a software store, which has no TPM; besides what `tpmStatus()` throws.
    public func tpmLockout() throws -> TPMStatus {
        guard let status = try tpmStatus() else {
            throw KeyManagerError(.usage, "this store keeps its keys in software: it uses no TPM")
        }
        return status
    }
}
