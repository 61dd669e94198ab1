/// An error keymgr reports to a person: a code of the taxonomy and a message that says what to do next.
///
/// Every error type conforms (`KeyManagerError`, the wire clients' `TransportError`, Sync's `SyncError`, the CLI's
/// `CommandFailure`), so the CLI maps any of them to an exit status in one place. Messages never contain a secret.
public protocol KeymgrFailure: Error, Sendable {
    /// What kind of error this is.
    var code: KeyManagerError.Code { get }
    /// What went wrong and what to do next, for a person.
    var message: String { get }
}

/// A code of keymgr's error taxonomy, as every `KeymgrFailure` carries it (the CLI's exit-code table maps it).
public typealias FailureCode = KeyManagerError.Code

/// The library's error type (in KeymgrCore, seen through KeyManager): a code of keymgr's error taxonomy
/// (docs/wire-formats.md) and a message a person can act on.
///
/// Messages never contain a secret (PIN, private key, token, client secret). The CLI maps `code` to an exit code.
public struct KeyManagerError: KeymgrFailure, Equatable, CustomStringConvertible {
    /// The error taxonomy: the Ping SDK's statuses plus keymgr's own.
    public enum Code: String, Sendable, CaseIterable, Codable {
        // The Ping SDK's statuses.
        case unsupported
        case clientNotRegistered
        case timeout
        case invalidCustomClaims
        case abort
        case unAuthorize
        // keymgr's own.
        case pinLocked
        case serverUnavailable
        case serverRejected
        case busy
        case config
        case badInput
        case safetyValve
        case tampered
        /// A TPM store older than its TPM's rollback counter: a restored copy, a replayed state, a deleted WAL.
        case rolledBack
        case usage
        /// A person answered no to a confirmation: nothing was done.
        case declined
        /// The agent's policy does not let the caller do this (exit 77): the message names the rule and why.
        case denied
        case failure
    }

    /// What kind of error this is.
    public let code: Code
    /// What went wrong and what to do next, for a person.
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.rawValue): \(message)" }
}
