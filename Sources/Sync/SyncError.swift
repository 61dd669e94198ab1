import KeyManager

/// The error type of the Sync services (sync, tokens, registrations, journeys, the admin and device-login services):
/// a code of keymgr's taxonomy and a message a person can act on. Errors of the KeyManager facade and the wire clients
/// pass through these services unchanged; this is for the rules the services themselves hold (a lease already held,
/// a profile that is not there, an ambiguous selector, a server that lacks a capability).
///
/// It is a `KeymgrFailure`, so the CLI maps it to the same exit status and JSON error as any other. Messages never
/// contain a secret.
public struct SyncError: KeymgrFailure, Equatable, CustomStringConvertible {
    public let code: FailureCode
    public let message: String

    public init(_ code: FailureCode, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.rawValue): \(message)" }
}
