import KeyManager

/// Why talking to a server failed: the one error type of the wire clients.
///
/// It carries a code of keymgr's taxonomy, so every command maps it to the same exit status (69, 75, 76, 77, 65).
public struct TransportError: KeymgrFailure, Equatable, CustomStringConvertible {
    /// What kind of failure this is.
    public enum Kind: String, Sendable {
        /// Could not connect, or a 5xx.
        case unavailable
        /// No answer in time.
        case timeout
        /// The server refused the request (4xx other than an authentication failure).
        case rejected
        /// The server refused the credential keymgr sent (401/403).
        case credentialRefused
        /// The answer was not what the wire format says (bad JSON, an endless listing, an oversized body).
        case malformed
    }

    public var kind: Kind
    public var message: String
    /// The OAuth `error` code the server answered with (`invalid_grant`, `invalid_client`, …), when it gave one.
    public var oauthError: String?

    public init(_ kind: Kind, _ message: String, oauthError: String? = nil) {
        self.kind = kind
        self.message = message
        self.oauthError = oauthError
    }

    /// The taxonomy's code for this failure.
    public var code: KeyManagerError.Code {
        switch kind {
        case .unavailable: .serverUnavailable
        case .timeout: .timeout
        case .rejected: .serverRejected
        case .credentialRefused: .unAuthorize
        case .malformed: .badInput
        }
    }

    public var description: String { message }
}
