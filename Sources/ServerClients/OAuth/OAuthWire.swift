import Foundation
import KeymgrCore
import Synchronization

/// Makes a DPoP proof (RFC 9449) for one request: the method, the URL (the maker drops query and fragment),
/// the server's latest nonce and, at a resource server, the access token the proof's `ath` hashes.
///
/// Supplied by the service that holds the user's DPoP key; the wire clients only call it.
public typealias DPoPProofMaker = @Sendable (_ htm: String, _ htu: URL, _ nonce: String?, _ accessToken: String?) throws -> String

/// The latest `DPoP-Nonce` each server sent, by origin (scheme, host and port), shared by the clients of one process.
public final class DPoPNonces: Sendable {
    private let nonces = Mutex<[String: String]>([:])

    public init() {}

    /// The latest nonce the origin of `url` sent, if any.
    public func nonce(for url: URL) -> String? {
        nonces.withLock { $0[Self.origin(url)] }
    }

    /// Remembers the `DPoP-Nonce` of `response`, if it carries a valid one.
    public func remember(_ response: HTTPResponse, from url: URL) {
        guard let nonce = response.headers["dpop-nonce"], Self.isValid(nonce) else { return }
        nonces.withLock { $0[Self.origin(url)] = nonce }
    }

    /// A nonce as RFC 9449 §8.1 allows it: `1*NQCHAR` (printable ASCII but `"` and `\`). Anything else (a
    /// header a proxy mangled, two nonces joined by ", ") is not put into a proof.
    public static func isValid(_ nonce: String?) -> Bool {
        guard let nonce, !nonce.isEmpty else { return false }
        return nonce.utf8.allSatisfy { $0 == 0x21 || (0x23...0x5B).contains($0) || (0x5D...0x7E).contains($0) }
    }

    static func origin(_ url: URL) -> String {
        "\(url.scheme?.lowercased() ?? "")://\(url.host?.lowercased() ?? ""):\(url.port.map(String.init) ?? "")"
    }
}

/// How a client authenticates at the token and revocation endpoints, from its registration.
public struct OAuthClientCredentials: Sendable {
    public var clientId: String
    public var clientSecret: String?
    /// `client_secret_basic`, `client_secret_post` or `none`.
    public var authMethod: String

    public init(clientId: String, clientSecret: String?, authMethod: String?) {
        self.clientId = clientId
        self.clientSecret = clientSecret
        self.authMethod = authMethod ?? (clientSecret == nil ? "none" : "client_secret_basic")
    }

    /// Adds the credentials to a form request as the method says (RFC 6749 §2.3.1). With `identifying`, a
    /// `client_secret_basic` client also names itself with `client_id` in the form: RFC 8628 §3.1 and §3.4 allow it
    /// alongside client authentication, and oauthlib-based servers refuse a device authorization request without
    /// it ("Missing client_id parameter.").
    func apply(to form: inout [(String, String)], headers: inout [String: String], identifying: Bool = false) {
        switch (authMethod, clientSecret) {
        case ("client_secret_post", let secret?):
            form.append(("client_id", clientId))
            form.append(("client_secret", secret))
        case (_, let secret?) where authMethod != "none":
            let pair = OAuthWire.formEncode(clientId) + ":" + OAuthWire.formEncode(secret)
            headers["Authorization"] = "Basic " + Data(pair.utf8).base64EncodedString()
            if identifying { form.append(("client_id", clientId)) }
        default:
            form.append(("client_id", clientId))
        }
    }
}

/// An OAuth error answer (RFC 6749 §5.2): `error` and, if given, `error_description`.
public struct OAuthErrorAnswer: Sendable, Equatable {
    public var status: Int
    public var error: OAuthErrorCode?
    public var description: String?
    /// The answer had no body at all.
    public var emptyBody: Bool
}

/// Helpers shared by the OAuth wire clients.
enum OAuthWire {
    /// `application/x-www-form-urlencoded` encoding of one name or value.
    static func formEncode(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._*")
        let encoded = text.addingPercentEncoding(withAllowedCharacters: allowed) ?? ""
        return encoded.replacingOccurrences(of: "%20", with: "+")
    }

    static func formBody(_ form: [(String, String)]) -> Data {
        Data(form.map { formEncode($0.0) + "=" + formEncode($0.1) }.joined(separator: "&").utf8)
    }

    /// The JSON object of a body, or nil.
    static func object(_ body: Data) -> [String: JSONValue]? {
        (try? JSONDecoder().decode(JSONValue.self, from: body))?.objectValue
    }

    static func errorAnswer(_ response: HTTPResponse) -> OAuthErrorAnswer {
        let object = object(response.body)
        return OAuthErrorAnswer(status: response.status, error: object?["error"]?.stringValue.map(OAuthErrorCode.init),
                                description: object?["error_description"]?.stringValue,
                                emptyBody: response.body.allSatisfy { $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 })
    }

    /// The failure for an answer nobody handled more specifically. The server's own error code and
    /// description are quoted (they carry no secret); request bodies never are.
    static func failure(_ response: HTTPResponse, doing: String) -> TransportError {
        let answer = errorAnswer(response)
        var detail = "the server answered \(response.status)"
        if let error = answer.error { detail += " \(error)" }
        if let description = answer.description { detail += " (\(description.prefix(200)))" }
        detail += " when asked to \(doing)"
        return TransportError(verdict: .init(status: response.status, oauthError: answer.error), detail)
    }

    /// Sends with retries on 429 and 503, honouring `Retry-After` (seconds) up to 30 s.
    static func send(_ http: any HTTPClient, _ request: HTTPRequest, maxAttempts: Int = 3) async throws -> HTTPResponse {
        try await RetryingHTTPClient(http, maxAttempts: maxAttempts).send(request)
    }

    /// A number of seconds: an integer, a fraction (rounded down) or a string of digits (Azure AD sends
    /// `"expires_in": "3599"`). A number too large for Int64 (1e300) is no duration keymgr can use: nil, as if it
    /// were left out.
    static func seconds(_ value: JSONValue?) -> Int64? {
        value?.intValue
            ?? value?.doubleValue.flatMap { $0.isFinite ? Int64(exactly: $0.rounded(.down)) : nil }
            ?? value?.stringValue.flatMap { Int64($0) }
    }
}
