import Foundation
import GRDB

/// The PIN verifier and failure counter of one APPLICATION_PIN key.
package struct AppPINRecord: KeymgrRecord, Equatable {
    package static let databaseTableName = "app_pins"

    package var kid: String
    package var argon2MemoryKib: Int
    package var argon2Iterations: Int
    package var argon2Parallelism: Int
    package var salt: Data
    /// Derived from Argon2id(PIN) with a master-key-derived pepper: useless without the master key.
    package var verifier: Data
    package var failedAttempts: Int
    package var pinRetry: Int
    package var updatedAt: Date

    package init(kid: String, argon2MemoryKib: Int, argon2Iterations: Int, argon2Parallelism: Int,
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
