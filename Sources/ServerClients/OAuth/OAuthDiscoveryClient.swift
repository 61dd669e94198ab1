import Foundation
import KeymgrCore

/// What an authorization server's metadata document says about its endpoints.
public struct OAuthServerMetadata: Sendable, Equatable {
    public var issuer: URL
    public var tokenEndpoint: URL?
    public var registrationEndpoint: URL?
    public var revocationEndpoint: URL?
    public var deviceAuthorizationEndpoint: URL?
    public var userinfoEndpoint: URL?
    /// Where the document was found.
    public var source: URL

    public init(issuer: URL, tokenEndpoint: URL?, registrationEndpoint: URL?, revocationEndpoint: URL?,
                deviceAuthorizationEndpoint: URL?, userinfoEndpoint: URL?, source: URL) {
        self.issuer = issuer
        self.tokenEndpoint = tokenEndpoint
        self.registrationEndpoint = registrationEndpoint
        self.revocationEndpoint = revocationEndpoint
        self.deviceAuthorizationEndpoint = deviceAuthorizationEndpoint
        self.userinfoEndpoint = userinfoEndpoint
        self.source = source
    }
}

/// Discovery: RFC 8414 authorization server metadata, else OpenID Connect Discovery.
public struct OAuthDiscoveryClient: Sendable {
    let http: any HTTPClient

    public init(http: any HTTPClient) {
        self.http = http
    }

    /// The URLs tried, in order: `/.well-known/oauth-authorization-server` inserted before the issuer's path
    /// (RFC 8414 §3.1), the same appended to the issuer, then `{issuer}/.well-known/openid-configuration`.
    public static func candidates(issuer: URL) -> [URL] {
        var text = issuer.absoluteString
        while text.hasSuffix("/") { text.removeLast() }
        guard var components = URLComponents(string: text) else { return [] }
        let path = components.path
        var urls: [URL] = []
        components.path = "/.well-known/oauth-authorization-server" + path
        if let url = components.url { urls.append(url) }
        if !path.isEmpty, let url = URL(string: text + "/.well-known/oauth-authorization-server") { urls.append(url) }
        if let url = URL(string: text + "/.well-known/openid-configuration") { urls.append(url) }
        return urls
    }

    /// Fetches the first metadata document that exists and checks its `issuer` is the one asked for.
    public func discover(issuer: URL) async throws -> OAuthServerMetadata {
        var lastFailure: TransportError?
        for url in Self.candidates(issuer: issuer) {
            let response = try await OAuthWire.send(http, HTTPRequest(method: "GET", url: url, headers: ["Accept": "application/json"]))
            guard response.status == 200 else {
                if response.status >= 500 { lastFailure = OAuthWire.failure(response, doing: "send its metadata") }
                continue
            }
            return try Self.metadata(response.body, from: url, issuer: issuer)
        }
        throw lastFailure ?? TransportError(.rejected, "no metadata found for issuer \(issuer.absoluteString) "
            + "(tried RFC 8414 and OpenID discovery): check --issuer, or give the endpoints with --token-endpoint etc.")
    }

    /// Reads a metadata document found at `url`: a JSON object naming `issuer` exactly (trailing slashes aside).
    static func metadata(_ body: Data, from url: URL, issuer: URL) throws -> OAuthServerMetadata {
        guard let object = OAuthWire.object(body) else {
            throw TransportError(.malformed, "the metadata at \(url.absoluteString) is not a JSON object")
        }
        guard let stated = object["issuer"]?.stringValue, let statedURL = URL(string: stated) else {
            throw TransportError(.malformed, "the metadata at \(url.absoluteString) names no issuer")
        }
        guard trimmed(stated) == trimmed(issuer.absoluteString) else {
            throw TransportError(.malformed, "the metadata at \(url.absoluteString) is for issuer \(stated), not \(issuer.absoluteString): "
                + "give --issuer exactly as the server names itself")
        }
        let endpoint = { (name: String) in object[name]?.stringValue.flatMap(URL.init(string:)) }
        return OAuthServerMetadata(
            issuer: statedURL, tokenEndpoint: endpoint("token_endpoint"),
            registrationEndpoint: endpoint("registration_endpoint"), revocationEndpoint: endpoint("revocation_endpoint"),
            deviceAuthorizationEndpoint: endpoint("device_authorization_endpoint"),
            userinfoEndpoint: endpoint("userinfo_endpoint"), source: url)
    }

    private static func trimmed(_ text: String) -> String {
        var text = text
        while text.hasSuffix("/") { text.removeLast() }
        return text
    }
}
