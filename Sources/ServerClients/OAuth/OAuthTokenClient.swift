import Foundation
import KeymgrCore

/// A successful token response (RFC 6749 §5.1): the domain's `IssuedTokens`, parsed from the wire here.
public typealias OAuthTokenResponse = IssuedTokens

extension IssuedTokens {
    /// Parses a token response; `token_type` is normalised to `DPoP` or `Bearer`.
    public static func parse(_ body: Data) throws -> OAuthTokenResponse {
        guard let object = OAuthWire.object(body) else {
            throw TransportError(.malformed, "the token response is not a JSON object")
        }
        return try parse(object)
    }

    public static func parse(_ object: [String: JSONValue]) throws -> OAuthTokenResponse {
        guard let access = object["access_token"]?.stringValue, !access.isEmpty else {
            throw TransportError(.malformed, "the token response has no access_token")
        }
        let type: String
        switch object["token_type"]?.stringValue?.lowercased() {
        case "dpop": type = "DPoP"
        case "bearer": type = "Bearer"
        case let other:
            throw TransportError(.malformed, "the token response has token_type \(other ?? "(none)"); keymgr knows DPoP and Bearer")
        }
        return OAuthTokenResponse(accessToken: access, tokenType: type, expiresIn: OAuthWire.seconds(object["expires_in"]),
                                  refreshToken: object["refresh_token"]?.stringValue, idToken: object["id_token"]?.stringValue,
                                  scope: object["scope"]?.stringValue)
    }
}

/// An RFC 8628 device authorization response.
public struct DeviceAuthorization: Sendable, Equatable {
    public var deviceCode: String
    public var userCode: String
    public var verificationURI: String
    public var verificationURIComplete: String?
    public var expiresIn: Int64
    /// Seconds between polls (5 when the server names none), at most `maximumInterval`.
    public var interval: Int64

    /// The longest wait between polls keymgr accepts: a server asking for more (an hour is already absurd for a
    /// login) is polled hourly, and the wait stays far from overflowing a nanosecond count.
    public static let maximumInterval: Int64 = 3600

    /// Parses a device authorization answer (RFC 8628 §3.2); `verification_url` (Google's older name) is accepted,
    /// and `expires_in` and `interval` are read as the token response's `expires_in` is (a string of digits too).
    public static func parse(_ body: Data) throws -> DeviceAuthorization {
        guard let object = OAuthWire.object(body) else {
            throw TransportError(.malformed, "the device authorization answer is not a JSON object")
        }
        guard let deviceCode = object["device_code"]?.stringValue,
              let userCode = object["user_code"]?.stringValue,
              let uri = object["verification_uri"]?.stringValue ?? object["verification_url"]?.stringValue else {
            throw TransportError(.malformed, "the device authorization answer lacks device_code, user_code or verification_uri")
        }
        return DeviceAuthorization(deviceCode: deviceCode, userCode: userCode, verificationURI: uri,
                                   verificationURIComplete: object["verification_uri_complete"]?.stringValue,
                                   expiresIn: OAuthWire.seconds(object["expires_in"]) ?? 600,
                                   interval: min(maximumInterval, max(1, OAuthWire.seconds(object["interval"]) ?? 5)))
    }
}

/// One poll of the device code grant.
public enum DevicePollResult: Sendable, Equatable {
    case tokens(OAuthTokenResponse)
    /// `authorization_pending`: ask again after the interval.
    case pending
    /// `slow_down`: ask again, 5 seconds slower.
    case slowDown
}

/// The token endpoint (RFC 6749: refresh; RFC 8628: device code), device authorization and revocation
/// (RFC 7009), with DPoP (RFC 9449) proofs and server nonces.
public struct OAuthTokenClient: Sendable {
    let http: any HTTPClient
    public let nonces: DPoPNonces
    /// The server's clock, learned from every answer's `Date` header (proof makers read it for `iat`).
    public let clock: ServerClock

    public init(http: any HTTPClient, nonces: DPoPNonces = DPoPNonces(), clock: ServerClock = ServerClock()) {
        self.http = http
        self.nonces = nonces
        self.clock = clock
    }

    /// Exchanges a refresh token. A 400 with an empty body is how some servers say the refresh token is dead:
    /// it is reported as `invalid_grant`.
    public func refresh(tokenEndpoint: URL, refreshToken: String, client: OAuthClientCredentials, scope: String?,
                        dpop: DPoPProofMaker?) async throws -> OAuthTokenResponse {
        var form = [("grant_type", "refresh_token"), ("refresh_token", refreshToken)]
        if let scope { form.append(("scope", scope)) }
        let response = try await tokenRequest(tokenEndpoint, form: form, client: client, dpop: dpop)
        guard response.status == 200 else {
            let answer = OAuthWire.errorAnswer(response)
            if response.status == 400, answer.emptyBody {
                throw TransportError(verdict: .init(status: 400, oauthError: .invalidGrant),
                                     "the server answered 400 with no body to the refresh: the refresh token is dead")
            }
            throw Self.tokenFailure(response, doing: "refresh the tokens")
        }
        return try OAuthTokenResponse.parse(response.body)
    }

    /// Starts the device authorization grant (RFC 8628 §3.1). `client_id` is always sent, with client
    /// authentication or without.
    public func authorizeDevice(endpoint: URL, client: OAuthClientCredentials, scope: String?) async throws -> DeviceAuthorization {
        var form: [(String, String)] = []
        if let scope { form.append(("scope", scope)) }
        var headers = ["Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"]
        client.apply(to: &form, headers: &headers, identifying: true)
        let response = try await OAuthWire.send(http, HTTPRequest(method: "POST", url: endpoint, headers: headers,
                                                                   body: OAuthWire.formBody(form)))
        clock.learn(from: response)
        guard response.status == 200 else { throw Self.tokenFailure(response, doing: "start a device login") }
        return try DeviceAuthorization.parse(response.body)
    }

    /// Polls once for the device code grant's tokens (RFC 8628 §3.4), naming the client with `client_id` as the
    /// device authorization request did. `expired_token` and `access_denied` throw.
    public func pollDeviceCode(tokenEndpoint: URL, deviceCode: String, client: OAuthClientCredentials,
                               dpop: DPoPProofMaker?) async throws -> DevicePollResult {
        let form = [("grant_type", "urn:ietf:params:oauth:grant-type:device_code"), ("device_code", deviceCode)]
        let response = try await tokenRequest(tokenEndpoint, form: form, client: client, dpop: dpop, identifying: true)
        if response.status == 200 { return .tokens(try OAuthTokenResponse.parse(response.body)) }
        switch OAuthWire.errorAnswer(response).error {
        case .authorizationPending: return .pending
        case .slowDown: return .slowDown
        case .expiredToken:
            throw TransportError(verdict: .init(status: response.status, oauthError: .expiredToken),
                                 "the login code expired before it was approved: run `keymgr login` again", kind: .rejected)
        case .accessDenied:
            throw TransportError(verdict: .init(status: response.status, oauthError: .accessDenied),
                                 "the login was denied at the verification page", kind: .credentialRefused)
        default:
            throw Self.tokenFailure(response, doing: "finish the device login")
        }
    }

    /// Revokes a token (RFC 7009). 200 means revoked or unknown (both fine).
    public func revoke(endpoint: URL, token: String, hint: String, client: OAuthClientCredentials) async throws {
        var form = [("token", token), ("token_type_hint", hint)]
        var headers = ["Content-Type": "application/x-www-form-urlencoded"]
        client.apply(to: &form, headers: &headers)
        let response = try await OAuthWire.send(http, HTTPRequest(method: "POST", url: endpoint, headers: headers,
                                                                   body: OAuthWire.formBody(form)))
        clock.learn(from: response)
        guard response.status == 200 else { throw Self.tokenFailure(response, doing: "revoke a token") }
    }

    /// Calls a DPoP- or Bearer-protected resource, retrying once when it asks for a nonce (401 with
    /// `WWW-Authenticate: DPoP error="use_dpop_nonce"`).
    public func resource(method: String, url: URL, accessToken: String, tokenType: String, dpop: DPoPProofMaker?) async throws -> HTTPResponse {
        var attempt = 0
        while true {
            var headers = ["Accept": "application/json"]
            if tokenType.caseInsensitiveCompare("DPoP") == .orderedSame, let dpop {
                headers["Authorization"] = "DPoP " + accessToken
                headers["DPoP"] = try dpop(method, url, nonces.nonce(for: url), accessToken)
            } else {
                headers["Authorization"] = "Bearer " + accessToken
            }
            let response = try await OAuthWire.send(http, HTTPRequest(method: method, url: url, headers: headers))
            nonces.remember(response, from: url)
            let clockMoved = clock.learn(from: response)
            attempt += 1
            if response.status == 401, attempt == 1, dpop != nil,
               Self.asksForNonce(response) && DPoPNonces.isValid(response.headers["dpop-nonce"]) || clockMoved {
                continue
            }
            return response
        }
    }

    /// A form POST to the token endpoint with client authentication and, when bound, a DPoP proof carrying the
    /// latest server nonce; one retry when the server answers `use_dpop_nonce` with a fresh `DPoP-Nonce`, or refuses
    /// the proof (`invalid_dpop_proof`) with a `Date` that shows this device's clock off by more than was known (the
    /// proof's `iat` was outside the server's window; the new proof's follows the server's clock).
    func tokenRequest(_ endpoint: URL, form: [(String, String)], client: OAuthClientCredentials,
                      dpop: DPoPProofMaker?, identifying: Bool = false) async throws -> HTTPResponse {
        var attempt = 0
        while true {
            var form = form
            var headers = ["Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"]
            client.apply(to: &form, headers: &headers, identifying: identifying)
            if let dpop { headers["DPoP"] = try dpop("POST", endpoint, nonces.nonce(for: endpoint), nil) }
            let response = try await OAuthWire.send(http, HTTPRequest(method: "POST", url: endpoint, headers: headers,
                                                                       body: OAuthWire.formBody(form)))
            nonces.remember(response, from: endpoint)
            let clockMoved = clock.learn(from: response)
            attempt += 1
            if (400...403).contains(response.status), attempt == 1, dpop != nil {
                let error = OAuthWire.errorAnswer(response).error
                if error == .useDPoPNonce && DPoPNonces.isValid(response.headers["dpop-nonce"])
                    || error == .invalidDPoPProof && clockMoved {
                    continue
                }
            }
            return response
        }
    }

    /// A resource server's 401 asking for a DPoP nonce: a `DPoP` challenge with `error="use_dpop_nonce"` (RFC 9449 §9).
    static func asksForNonce(_ response: HTTPResponse) -> Bool {
        HTTPChallenge.parse(response.headers["www-authenticate"] ?? "").contains {
            $0.isScheme("DPoP") && $0.parameters["error"].map(OAuthErrorCode.init) == .useDPoPNonce
        }
    }

    /// Token endpoint failures by meaning: `invalid_dpop_proof` comes with 400, 401 or 403 depending on the server.
    static func tokenFailure(_ response: HTTPResponse, doing: String) -> TransportError {
        let failure = OAuthWire.failure(response, doing: doing)
        // A 401 with a Basic challenge and no readable body is the client authentication failing (RFC 6749 §5.2).
        if failure.oauthError == nil, response.status == 401,
           HTTPChallenge.parse(response.headers["www-authenticate"] ?? "").contains(where: { $0.isScheme("Basic") }) {
            return TransportError(verdict: .init(status: 401, oauthError: .invalidClient),
                                  failure.message + ": the server refused the client's credentials (invalid_client)")
        }
        if let verdict = failure.verdict, verdict.oauthError == .invalidDPoPProof || verdict.oauthError == .useDPoPNonce {
            return TransportError(verdict: verdict, failure.message, kind: .rejected)
        }
        return failure
    }
}
