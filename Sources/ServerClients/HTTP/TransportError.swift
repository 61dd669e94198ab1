import KeymgrCore

/// Why talking to a server failed: the one error type of the wire clients.
///
/// Two kinds of failure: the exchange itself failed (no connection, no answer in time, an answer not in the wire
/// format), or the server answered with a verdict on the request (`verdict`: its HTTP status and, from an OAuth
/// server, its typed error code). Either carries a code of keymgr's taxonomy, so every command maps it to the same
/// exit status (69, 75, 76, 77, 65). Its fields are read-only: a failure is what the server or the transport said.
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

    /// A server's verdict on a request it answered: the HTTP status, and the OAuth error code when it gave one.
    public struct Verdict: Sendable, Equatable {
        public let status: Int
        public let oauthError: OAuthErrorCode?

        public init(status: Int, oauthError: OAuthErrorCode? = nil) {
            self.status = status
            self.oauthError = oauthError
        }

        /// The kind a status means: 5xx unavailable, 401 and 403 the credential refused, any other refused.
        var kind: Kind {
            switch status {
            case 500...: .unavailable
            case 401, 403: .credentialRefused
            default: .rejected
            }
        }
    }

    private let storedKind: Kind
    private var storedMessage: String
    private let storedVerdict: Verdict?

    /// A failure of the exchange (or of the answer's form), with no verdict of the server's.
    public init(_ kind: Kind, _ message: String) {
        storedKind = kind
        storedMessage = message
        storedVerdict = nil
    }

    /// The server's verdict; its kind follows from the status unless `kind` says otherwise (a DPoP proof refused with
    /// 401 is a refused request, not a refused credential).
    public init(verdict: Verdict, _ message: String, kind: Kind? = nil) {
        storedKind = kind ?? verdict.kind
        storedMessage = message
        storedVerdict = verdict
    }

    /// The same, the kind given first (where the status alone does not say it).
    public init(verdict: Verdict, kind: Kind, _ message: String) {
        self.init(verdict: verdict, message, kind: kind)
    }

    /// The same failure, its message followed by `advice`.
    package func adding(_ advice: String) -> TransportError {
        var copy = self
        copy.storedMessage += advice
        return copy
    }

    /// What kind of failure this is.
    public var kind: Kind { storedKind }
    /// What went wrong, for a person.
    public var message: String { storedMessage }
    /// The server's verdict, when it answered; nil when the exchange itself failed.
    public var verdict: Verdict? { storedVerdict }
    /// The OAuth error code the server answered with, when it gave one.
    public var oauthError: OAuthErrorCode? { storedVerdict?.oauthError }

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
