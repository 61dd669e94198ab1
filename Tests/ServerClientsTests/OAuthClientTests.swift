import Foundation
import KeyManager
@testable import ServerClients
import XCTest

/// The OAuth wire clients against a stub HTTP client: what real servers do that the RFCs did not foresee.
final class OAuthClientTests: XCTestCase {
    private let tokenEndpoint = URL(string: "https://as.example.com/oauth/v2/oauth-token?x=1")!
    private let client = OAuthClientCredentials(clientId: "c 1", clientSecret: "s&cret", authMethod: "client_secret_basic")

    /// A proof maker that writes what it was asked for, so the tests see the nonce and URL each attempt used.
    private let proofs: DPoPProofMaker = { htm, htu, nonce, token in "\(htm) \(htu.absoluteString) nonce=\(nonce ?? "-") ath=\(token ?? "-")" }

    private static func form(_ request: HTTPRequest) -> [String: String] {
        let text = String(decoding: request.body ?? Data(), as: UTF8.self)
        var out: [String: String] = [:]
        for pair in text.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1).map { String($0).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? "" }
            out[parts[0]] = parts.count > 1 ? parts[1] : ""
        }
        return out
    }

    func testRegistrationAcceptsOKAndCreatedAndKeepsUnknownMembers() async throws {
        for status in [200, 201] {
            let stub = StubHTTPClient { _ in
                StubHTTPClient.json(status, #"{"client_id":"c1","client_secret":"s1","token_endpoint_auth_method":["client_secret_post"],"x_vendor":{"a":1}}"#)
            }
            let answer = try await OAuthRegistrationClient(http: stub).register(
                endpoint: URL(string: "https://as.example.com/dcr")!, metadata: ["software_id": "tpl"], initialAccessToken: "iat-1")
            XCTAssertEqual(answer["client_id"], "c1")
            XCTAssertEqual(answer["x_vendor"]?["a"], .int(1), "unknown members are kept")
            XCTAssertEqual(stub.requests.first?.headers["Authorization"], "Bearer iat-1")
            let body = try JSONDecoder().decode(JSONValue.self, from: stub.requests.first?.body ?? Data())
            XCTAssertEqual(body["software_id"], "tpl")
        }
        let refused = StubHTTPClient { _ in StubHTTPClient.json(401, #"{"error":"invalid_token"}"#) }
        do {
            _ = try await OAuthRegistrationClient(http: refused).register(endpoint: URL(string: "https://as.example.com/dcr")!,
                                                                          metadata: [:], initialAccessToken: "iat-secret")
            XCTFail("a refused registration must throw")
        } catch let error as TransportError {
            XCTAssertEqual(error.kind, .credentialRefused)
            XCTAssertFalse(error.message.contains("iat-secret"), "no secret in messages")
        }
    }

    func testManagementReadAnswering401MeansTheClientIsGone() async throws {
        let stub = StubHTTPClient { request in
            request.headers["Authorization"] == "Bearer rat-live"
                ? StubHTTPClient.json(200, #"{"client_id":"c1","registration_access_token":"rat-2","client_secret":"s2"}"#)
                : HTTPResponse(status: 401)
        }
        let registrations = OAuthRegistrationClient(http: stub)
        let uri = URL(string: "https://as.example.com/dcr/c1")!
        let live = try await registrations.read(registrationClientURI: uri, registrationAccessToken: "rat-live")
        guard case .current(let answer) = live else { return XCTFail("expected the client's metadata") }
        XCTAssertEqual(answer["registration_access_token"], "rat-2")
        let gone = try await registrations.read(registrationClientURI: uri, registrationAccessToken: "rat-dead")
        XCTAssertEqual(gone, .gone)
    }

    func testTokenEndpointNonceRetryRemembersTheNonceAndAuthenticatesTheClient() async throws {
        let stub = StubHTTPClient { request in
            let proof = request.headers["DPoP"] ?? ""
            if proof.contains("nonce=n-1") {
                return StubHTTPClient.json(200, #"{"access_token":"at-2","token_type":"dpop","expires_in":300,"refresh_token":"rt-2"}"#,
                                           headers: ["dpop-nonce": "n-1"])
            }
            return StubHTTPClient.json(400, #"{"error":"use_dpop_nonce"}"#, headers: ["dpop-nonce": "n-1"])
        }
        let tokens = OAuthTokenClient(http: stub)
        let response = try await tokens.refresh(tokenEndpoint: tokenEndpoint, refreshToken: "rt-1", client: client, scope: nil, dpop: proofs)
        XCTAssertEqual(response.tokenType, "DPoP", "token_type is compared case-insensitively")
        XCTAssertEqual(response.refreshToken, "rt-2")
        let requests = stub.requests
        XCTAssertEqual(requests.count, 2, "one retry with the server's nonce")
        XCTAssertTrue(requests[0].headers["DPoP"]?.contains("nonce=-") == true)
        XCTAssertTrue(requests[1].headers["DPoP"]?.contains("nonce=n-1") == true)
        XCTAssertEqual(Self.form(requests[1])["grant_type"], "refresh_token")
        XCTAssertEqual(Self.form(requests[1])["refresh_token"], "rt-1")
        XCTAssertNil(Self.form(requests[1])["client_secret"], "client_secret_basic keeps the secret out of the body")
        XCTAssertEqual(requests[1].headers["Authorization"], "Basic " + Data("c+1:s%26cret".utf8).base64EncodedString())
        XCTAssertEqual(tokens.nonces.nonce(for: tokenEndpoint), "n-1", "the latest nonce is remembered")

        // The next request starts with the remembered nonce: no extra round trip.
        _ = try await tokens.refresh(tokenEndpoint: tokenEndpoint, refreshToken: "rt-2", client: client, scope: nil, dpop: proofs)
        XCTAssertEqual(stub.requests.count, 3)
    }

    func testClientSecretPostSendsTheSecretInTheBody() async throws {
        let stub = StubHTTPClient { _ in StubHTTPClient.json(200, #"{"access_token":"a","token_type":"Bearer"}"#) }
        let post = OAuthClientCredentials(clientId: "c1", clientSecret: "s1", authMethod: "client_secret_post")
        _ = try await OAuthTokenClient(http: stub).refresh(tokenEndpoint: tokenEndpoint, refreshToken: "r", client: post, scope: nil, dpop: nil)
        let request = try XCTUnwrap(stub.requests.first)
        XCTAssertNil(request.headers["Authorization"])
        XCTAssertNil(request.headers["DPoP"], "an unbound client sends no proof")
        XCTAssertEqual(Self.form(request)["client_id"], "c1")
        XCTAssertEqual(Self.form(request)["client_secret"], "s1")
    }

    func testDeadRefreshTokensAndDPoPErrorsAreRecognisedByMeaning() async throws {
        func refreshFailure(_ response: HTTPResponse) async -> TransportError? {
            let stub = StubHTTPClient { _ in response }
            do {
                _ = try await OAuthTokenClient(http: stub).refresh(tokenEndpoint: tokenEndpoint, refreshToken: "r", client: client,
                                                                   scope: nil, dpop: nil)
                return nil
            } catch {
                return error as? TransportError
            }
        }
        let empty = await refreshFailure(HTTPResponse(status: 400))
        XCTAssertEqual(empty?.oauthError, .invalidGrant, "400 with an empty body is a dead refresh token")
        let grant = await refreshFailure(StubHTTPClient.json(400, #"{"error":"invalid_grant"}"#))
        XCTAssertEqual(grant?.oauthError, .invalidGrant)
        // oauthlib before 3.0 answered invalid_grant with 401.
        let grant401 = await refreshFailure(StubHTTPClient.json(401, #"{"error":"invalid_grant"}"#))
        XCTAssertEqual(grant401?.oauthError, .invalidGrant)
        for status in [400, 401, 403] {
            let dpop = await refreshFailure(StubHTTPClient.json(status, #"{"error":"invalid_dpop_proof"}"#))
            XCTAssertEqual(dpop?.oauthError, .invalidDPoPProof, "status \(status)")
        }
        let client401 = await refreshFailure(StubHTTPClient.json(401, #"{"error":"invalid_client"}"#))
        XCTAssertEqual(client401?.oauthError, .invalidClient)
        XCTAssertEqual(client401?.kind, .credentialRefused)
        // oauthlib answers every 401 with a Bearer challenge, also to a client that used Basic: the body decides.
        let bearerChallenge = await refreshFailure(StubHTTPClient.json(401, #"{"error":"invalid_client"}"#,
                                                                       headers: ["www-authenticate": #"Bearer error="invalid_client""#]))
        XCTAssertEqual(bearerChallenge?.oauthError, .invalidClient)
        let html = await refreshFailure(HTTPResponse(status: 200, headers: ["content-type": "text/html"], body: Data("<html>".utf8)))
        XCTAssertEqual(html?.kind, .malformed)
        let unknownType = await refreshFailure(StubHTTPClient.json(200, #"{"access_token":"a","token_type":"mac"}"#))
        XCTAssertEqual(unknownType?.kind, .malformed)
    }

    func testResourceRetriesOnceOnAWWWAuthenticateNonceChallenge() async throws {
        let stub = StubHTTPClient { request in
            if request.headers["DPoP"]?.contains("nonce=r-1") == true { return StubHTTPClient.json(200, #"{"sub":"alice"}"#) }
            return HTTPResponse(status: 401, headers: ["www-authenticate": #"DPoP error="use_dpop_nonce", error_description="nonce""#,
                                                       "dpop-nonce": "r-1"])
        }
        let resource = URL(string: "https://rs.example.com/api/me?q=1#f")!
        let response = try await OAuthTokenClient(http: stub).resource(method: "GET", url: resource, accessToken: "at-1",
                                                                       tokenType: "DPoP", dpop: proofs)
        XCTAssertEqual(response.status, 200)
        XCTAssertEqual(stub.requests.count, 2)
        XCTAssertEqual(stub.requests[1].headers["Authorization"], "DPoP at-1")
        XCTAssertTrue(stub.requests[1].headers["DPoP"]?.contains("ath=at-1") == true)
    }

    func testDeviceCodePollingOutcomes() async throws {
        let answers = ["authorization_pending", "slow_down", "expired_token", "access_denied"]
        for answer in answers {
            let stub = StubHTTPClient { _ in StubHTTPClient.json(400, #"{"error":"\#(answer)"}"#) }
            let tokens = OAuthTokenClient(http: stub)
            do {
                let result = try await tokens.pollDeviceCode(tokenEndpoint: tokenEndpoint, deviceCode: "dc", client: client, dpop: nil)
                XCTAssertEqual(result, answer == "slow_down" ? .slowDown : .pending, answer)
                XCTAssertTrue(answer == "authorization_pending" || answer == "slow_down")
            } catch let error as TransportError {
                XCTAssertEqual(error.oauthError, OAuthErrorCode(answer))
            }
            XCTAssertEqual(Self.form(stub.requests[0])["grant_type"], "urn:ietf:params:oauth:grant-type:device_code")
        }
    }

    /// The names of a request's form parameters, repeats kept.
    private static func formNames(_ request: HTTPRequest) -> [String] {
        String(decoding: request.body ?? Data(), as: UTF8.self).split(separator: "&").map { String($0.prefix { $0 != "=" }) }
    }

    /// oauthlib-based servers refuse a device authorization request without `client_id` ("Missing client_id
    /// parameter.") even from a client that authenticates with HTTP Basic: keymgr names the client in the form of the
    /// device authorization request and of its polls (RFC 8628 §3.1, §3.4 allow it), and sends the form's
    /// `Content-Type` without parameters (oauthlib compares the whole header).
    func testTheDeviceGrantNamesTheClientAlongsideBasicAuthentication() async throws {
        let stub = StubHTTPClient { request in
            if request.url.path.hasSuffix("/token") { return StubHTTPClient.json(400, #"{"error":"authorization_pending"}"#) }
            return StubHTTPClient.json(200, #"{"device_code":"dc","user_code":"WDJB-MJHT","verification_uri":"https://as.example.com/device","expires_in":1800}"#)
        }
        let tokens = OAuthTokenClient(http: stub)
        let authorization = try await tokens.authorizeDevice(endpoint: URL(string: "https://as.example.com/device_authorization")!,
                                                             client: client, scope: "openid read")
        XCTAssertEqual(authorization.interval, 5, "no interval in the answer (oauthlib's default): RFC 8628's 5 s")
        XCTAssertNil(authorization.verificationURIComplete)
        XCTAssertEqual(authorization.expiresIn, 1800)
        let start = try XCTUnwrap(stub.requests.first)
        XCTAssertEqual(Self.form(start)["client_id"], "c 1", "client_id is sent with Basic authentication")
        XCTAssertEqual(Self.form(start)["scope"], "openid read")
        XCTAssertNil(Self.form(start)["client_secret"], "the secret stays in the Basic header")
        XCTAssertEqual(start.headers["Authorization"], "Basic " + Data("c+1:s%26cret".utf8).base64EncodedString())
        XCTAssertEqual(start.headers["Content-Type"], "application/x-www-form-urlencoded")

        let poll = try await tokens.pollDeviceCode(tokenEndpoint: URL(string: "https://as.example.com/token")!, deviceCode: "dc",
                                                   client: client, dpop: nil)
        XCTAssertEqual(poll, .pending)
        let polled = stub.requests[1]
        XCTAssertEqual(Self.form(polled)["client_id"], "c 1", "the poll names the client too")
        XCTAssertEqual(Self.form(polled)["device_code"], "dc")
        XCTAssertNil(polled.headers["DPoP"], "no proof maker, no DPoP header")

        // client_secret_post and public clients already name themselves: client_id is never sent twice.
        for other in [OAuthClientCredentials(clientId: "c2", clientSecret: "s2", authMethod: "client_secret_post"),
                      OAuthClientCredentials(clientId: "c3", clientSecret: nil, authMethod: nil)] {
            let single = StubHTTPClient { _ in
                StubHTTPClient.json(200, #"{"device_code":"d","user_code":"U","verification_uri":"https://as.example.com/device"}"#)
            }
            _ = try await OAuthTokenClient(http: single).authorizeDevice(endpoint: URL(string: "https://as.example.com/da")!,
                                                                         client: other, scope: nil)
            let request = try XCTUnwrap(single.requests.first)
            XCTAssertEqual(Self.formNames(request).filter { $0 == "client_id" }.count, 1, other.authMethod)
            XCTAssertEqual(Self.form(request)["client_id"], other.clientId)
        }

        // Numbers as strings, as in Azure AD's token responses, are read in the device authorization answer too.
        let strings = try DeviceAuthorization.parse(Data(#"{"device_code":"d","user_code":"U","verification_url":"https://microsoft.com/devicelogin","expires_in":"900","interval":"7"}"#.utf8))
        XCTAssertEqual(strings.expiresIn, 900)
        XCTAssertEqual(strings.interval, 7)

        // The refresh keeps RFC 6749 §6's form: Basic authentication alone.
        let refresh = StubHTTPClient { _ in StubHTTPClient.json(200, #"{"access_token":"a","token_type":"Bearer"}"#) }
        _ = try await OAuthTokenClient(http: refresh).refresh(tokenEndpoint: tokenEndpoint, refreshToken: "r", client: client,
                                                              scope: nil, dpop: nil)
        XCTAssertNil(Self.form(try XCTUnwrap(refresh.requests.first))["client_id"])
    }

    func testDiscoveryFallsBackToOpenIDAndChecksTheIssuer() async throws {
        let issuer = URL(string: "https://as.example.com/oauth/v2/oauth-anonymous")!
        let stub = StubHTTPClient { request in
            guard request.url.path.hasSuffix("/.well-known/openid-configuration") else { return HTTPResponse(status: 404) }
            return StubHTTPClient.json(200, #"{"issuer":"https://as.example.com/oauth/v2/oauth-anonymous","token_endpoint":"https://as.example.com/t","device_authorization_endpoint":"https://as.example.com/d"}"#)
        }
        let metadata = try await OAuthDiscoveryClient(http: stub).discover(issuer: issuer)
        XCTAssertEqual(metadata.tokenEndpoint?.absoluteString, "https://as.example.com/t")
        XCTAssertEqual(metadata.deviceAuthorizationEndpoint?.absoluteString, "https://as.example.com/d")
        XCTAssertEqual(stub.requests.map(\.url.path), [
            "/.well-known/oauth-authorization-server/oauth/v2/oauth-anonymous",
            "/oauth/v2/oauth-anonymous/.well-known/oauth-authorization-server",
            "/oauth/v2/oauth-anonymous/.well-known/openid-configuration",
        ])
        let impostor = StubHTTPClient { _ in StubHTTPClient.json(200, #"{"issuer":"https://evil.example.com"}"#) }
        do {
            _ = try await OAuthDiscoveryClient(http: impostor).discover(issuer: issuer)
            XCTFail("metadata for another issuer must be refused")
        } catch let error as TransportError {
            XCTAssertEqual(error.kind, .malformed)
        }
    }
}
