import Foundation
import KeymgrCore

/// What a management GET (RFC 7592) found.
public enum RegistrationReadResult: Sendable, Equatable {
    /// The client's current metadata, with whatever credentials the server rotated.
    case current([String: JSONValue])
    /// 401: the client no longer exists or its registration access token is dead (RFC 7592 §2.1).
    case gone
    /// The registration access token refused otherwise than RFC 7592 says: 400 `access_denied` (Authlib, after it
    /// deleted the client) or 403. Probably gone, but not certainly: nothing is wiped on it.
    case refused(status: Int, error: String?)
}

/// Dynamic Client Registration (RFC 7591) and its management protocol (RFC 7592).
public struct OAuthRegistrationClient: Sendable {
    let http: any HTTPClient

    public init(http: any HTTPClient) {
        self.http = http
    }

    /// Registers a client; accepts 201 (RFC 7591) and 200 (what some servers send). Returns every response member.
    public func register(endpoint: URL, metadata: [String: JSONValue], initialAccessToken: String?) async throws -> [String: JSONValue] {
        var headers = ["Content-Type": "application/json", "Accept": "application/json"]
        if let initialAccessToken { headers["Authorization"] = "Bearer " + initialAccessToken }
        let body = Data(JSONValue.object(metadata).canonicalJSON().utf8)
        let response = try await OAuthWire.send(http, HTTPRequest(method: "POST", url: endpoint, headers: headers, body: body))
        guard response.status == 200 || response.status == 201 else {
            if response.status == 401 || response.status == 403 {
                throw OAuthWire.failure(response, doing: "register a client").adding(": check the initial access token file")
            }
            throw OAuthWire.failure(response, doing: "register a client")
        }
        return try Self.clientInformation(response, from: endpoint)
    }

    /// Reads the client's registration (RFC 7592 GET). Curity rotates the registration access token and the
    /// client secret on every read: the caller must store what comes back.
    public func read(registrationClientURI: URL, registrationAccessToken: String) async throws -> RegistrationReadResult {
        let response = try await OAuthWire.send(http, HTTPRequest(method: "GET", url: registrationClientURI, headers: [
            "Authorization": "Bearer " + registrationAccessToken, "Accept": "application/json",
        ]))
        if response.status == 401 { return .gone }
        if let refusal = Self.tokenRefusal(response) { return refusal }
        guard response.status == 200 else { throw OAuthWire.failure(response, doing: "read a client registration") }
        return .current(try Self.clientInformation(response, from: registrationClientURI))
    }

    /// Deletes the client (RFC 7592 DELETE). 204/200 confirm; 401 and 404 mean it is already gone.
    public func delete(registrationClientURI: URL, registrationAccessToken: String) async throws {
        let response = try await OAuthWire.send(http, HTTPRequest(method: "DELETE", url: registrationClientURI, headers: [
            "Authorization": "Bearer " + registrationAccessToken,
        ]))
        guard (200..<300).contains(response.status) || response.status == 401 || response.status == 404 else {
            if case .refused(let status, let error) = Self.tokenRefusal(response) {
                throw TransportError(verdict: .init(status: status, oauthError: error.map(OAuthErrorCode.init)),
                                     "the server refuses the registration access token (HTTP \(status)\(error.map { " \($0)" } ?? "")): "
                                     + "the client was probably deleted there", kind: .credentialRefused)
            }
            throw OAuthWire.failure(response, doing: "delete a client registration")
        }
    }

    /// A management answer refusing the registration access token other than with 401: 403, or 400 with
    /// `access_denied` (Authlib). A 400 with any other error (or none) is not one: it may be the request.
    static func tokenRefusal(_ response: HTTPResponse) -> RegistrationReadResult? {
        let error = OAuthWire.errorAnswer(response).error
        switch response.status {
        case 403: return .refused(status: 403, error: error?.rawValue)
        case 400 where error == .accessDenied: return .refused(status: 400, error: error?.rawValue)
        default: return nil
        }
    }

    static func clientInformation(_ response: HTTPResponse, from url: URL) throws -> [String: JSONValue] {
        guard let object = OAuthWire.object(response.body) else {
            throw TransportError(.malformed, "the registration answer from \(url.absoluteString) is not a JSON object")
        }
        guard let clientId = object["client_id"]?.stringValue, !clientId.isEmpty else {
            throw TransportError(.malformed, "the registration answer from \(url.absoluteString) has no client_id")
        }
        return object
    }
}
