import Foundation
import GRDB

/// The PIN verifier and failure counter of one APPLICATION_PIN key.
public struct AppPINRecord: KeymgrRecord, Equatable {
    public static let databaseTableName = "app_pins"

    public var kid: String
    public var argon2MemoryKib: Int
    public var argon2Iterations: Int
    public var argon2Parallelism: Int
    public var salt: Data
    /// Derived from Argon2id(PIN) with a master-key-derived pepper: useless without the master key.
    public var verifier: Data
    public var failedAttempts: Int
    public var pinRetry: Int
    public var updatedAt: Date
    /// HMAC under a master-derived key over the fields that gate access (nil only before a legacy store is stamped).
    public var integrityMac: Data?

    public init(kid: String, argon2MemoryKib: Int, argon2Iterations: Int, argon2Parallelism: Int,
                salt: Data, verifier: Data, failedAttempts: Int = 0, pinRetry: Int, updatedAt: Date) {
        self.kid = kid
        self.argon2MemoryKib = argon2MemoryKib
        self.argon2Iterations = argon2Iterations
        self.argon2Parallelism = argon2Parallelism
        self.salt = salt
        self.verifier = verifier
        self.failedAttempts = failedAttempts
        self.pinRetry = pinRetry
        self.updatedAt = updatedAt
    }
}
