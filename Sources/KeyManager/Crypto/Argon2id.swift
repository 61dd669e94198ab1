import CArgon2

/// Argon2 cost parameters, stored with each PIN record so they can be raised later.
public struct Argon2Parameters: Sendable, Equatable, Codable {
    /// Memory in KiB (`m`).
    public var memoryKiB: Int
    /// Passes over memory (`t`).
    public var iterations: Int
    /// Lanes and threads (`p`).
    public var parallelism: Int

    /// Parameters with the given costs.
    public init(memoryKiB: Int, iterations: Int, parallelism: Int) {
        self.memoryKiB = memoryKiB
        self.iterations = iterations
        self.parallelism = parallelism
    }

    /// RFC 9106 §4's second recommended option: m = 64 MiB, t = 3, p = 4.
    public static let rfc9106SecondRecommendation = Argon2Parameters(memoryKiB: 65536, iterations: 3, parallelism: 4)
}

/// Argon2id (RFC 9106) through libargon2, for deriving keys from PINs.
package enum Argon2id {
    /// The shortest salt accepted, in bytes (libargon2's minimum; keymgr uses 16).
    package static let minimumSaltByteCount = 8

    /// Derives `outputByteCount` bytes from `password` and `salt` with `parameters`.
    ///
    /// Throws `.badInput` for parameters or a salt libargon2 rejects and `.failure` when it cannot run
    /// (memory, threads), with libargon2's message; never with the password.
    package static func derive(
        password: SecretBytes, salt: [UInt8], parameters: Argon2Parameters, outputByteCount: Int = 32
    ) throws -> SecretBytes {
        guard salt.count >= minimumSaltByteCount else {
            throw KeyManagerError(.badInput, "Argon2id salt must be at least \(minimumSaltByteCount) bytes")
        }
        guard let memory = UInt32(exactly: parameters.memoryKiB),
            let iterations = UInt32(exactly: parameters.iterations),
            let parallelism = UInt32(exactly: parameters.parallelism),
            outputByteCount >= 0, salt.count <= Int(UInt32.max)
        else {
            throw KeyManagerError(.badInput, "Argon2id parameters out of range: \(parameters)")
        }
        return try SecretBytes(count: outputByteCount) { output in
            let status = password.withUnsafeBytes { pwd in
                salt.withUnsafeBytes { saltBytes in
                    argon2id_hash_raw(
                        iterations, memory, parallelism, pwd.baseAddress, pwd.count, saltBytes.baseAddress,
                        saltBytes.count, output.baseAddress, output.count)
                }
            }
            guard status == ARGON2_OK.rawValue else {
                let reason = argon2_error_message(status).map { String(cString: $0) } ?? "error \(status)"
                let resourceErrors = [
                    ARGON2_MEMORY_ALLOCATION_ERROR, ARGON2_THREAD_FAIL, ARGON2_OUTPUT_PTR_NULL,
                ].map(\.rawValue)
                throw KeyManagerError(resourceErrors.contains(status) ? .failure : .badInput, "Argon2id: \(reason)")
            }
        }
    }
}
