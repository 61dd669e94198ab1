import Foundation
import KeyManager
import XCTest

@testable import RefServer

/// DPoP (RFC 9449) at the token endpoint and the resource, with proofs signed by keymgr's `JWS`.
final class OAuthDPoPTests: OAuthServerTestCase {
    func testABoundRefreshTokenNeedsAProofByItsKey() async throws {
        let client = try await register()
        let key = try DPoPTestKey()
        let other = try DPoPTestKey()
        let (_, refreshToken) = try await mint(client, jkt: key.jkt)

        let withoutProof = try await refresh(client, refreshToken)
        XCTAssertEqual(withoutProof.status, 400)
        XCTAssertEqual(try withoutProof.object()["error"] as? String, "invalid_dpop_proof")
        let otherKey = try await refresh(client, refreshToken, proof: other.proof("POST", server.oauthTokenEndpoint))
        XCTAssertEqual(try otherKey.object()["error"] as? String, "invalid_dpop_proof")

        let bound = try await refresh(client, refreshToken, proof: key.proof("POST", server.oauthTokenEndpoint))
        XCTAssertEqual(bound.status, 200, String(decoding: bound.body, as: UTF8.self))
        let tokens = try bound.object()
        XCTAssertEqual(tokens["token_type"] as? String, "DPoP")
        let access = try await tokenInfo(try XCTUnwrap(tokens["access_token"] as? String))
        let refresh = try await tokenInfo(try XCTUnwrap(tokens["refresh_token"] as? String))
        XCTAssertEqual(access.jkt, key.jkt)
        XCTAssertEqual(refresh.jkt, key.jkt)
        XCTAssertEqual(refresh.grantId, access.grantId)
    }

    func testProofsThatMustBeRefused() async throws {
        let client = try await register()
        let key = try DPoPTestKey()
        let other = try DPoPTestKey()
        let (_, refreshToken) = try await mint(client, jkt: key.jkt)
        let url = server.oauthTokenEndpoint
        let replayed = try key.proof("POST", url, jti: "used-once")
        let first = try await refresh(client, refreshToken, proof: replayed)
        XCTAssertEqual(first.status, 200)
        let tokens = try first.object()
        let nextRefresh = try XCTUnwrap(tokens["refresh_token"] as? String)

        let spoiled: [(String, String)] = [
            ("signature by another key", try other.proof("POST", url, headerJWK: key.jwk)),
            ("wrong htm", try key.proof("GET", url)),
            ("wrong htu", try key.proof("POST", server.oauthRevocationEndpoint)),
            ("wrong port", try key.proof("POST", URL(string: "http://127.0.0.1:1/oauth/v2/oauth-token")!)),
            ("replayed jti", replayed),
            ("iat too old", try key.proof("POST", url, issuedAt: Date().addingTimeInterval(-600))),
            ("iat in the future", try key.proof("POST", url, issuedAt: Date().addingTimeInterval(600))),
            ("typ JWT", try key.proof("POST", url, typ: "JWT")),
            ("not a JWS", "not.a-jws"),
        ]
        for (name, proof) in spoiled {
            let result = try await refresh(client, nextRefresh, proof: proof)
            XCTAssertEqual(result.status, 400, name)
            XCTAssertEqual(try result.object()["error"] as? String, "invalid_dpop_proof", name)
        }
        // A refused proof spends nothing: the refresh token still works with a good proof.
        let good = try await refresh(client, nextRefresh, proof: key.proof("POST", url))
        XCTAssertEqual(good.status, 200)
    }

    func testHTUIsComparedWithoutQueryAndAfterNormalization() async throws {
        let client = try await register()
        let key = try DPoPTestKey()
        var (_, refreshToken) = try await mint(client, jkt: key.jkt)
        let base = server.baseURL
        let variants = [
            "HTTP://127.0.0.1:\(base.port ?? 0)/oauth/v2/oauth-token",
            server.oauthTokenEndpoint.absoluteString + "?x=1#frag",
            "http://127.0.0.1:\(base.port ?? 0)/oauth/v2/oauth%2Dtoken",
        ]
        for variant in variants {
            let result = try await refresh(client, refreshToken, proof: key.proof("POST", try XCTUnwrap(URL(string: variant))))
            XCTAssertEqual(result.status, 200, variant)
            refreshToken = try XCTUnwrap(try result.object()["refresh_token"] as? String)
        }
    }

    func testTokenEndpointNonces() async throws {
        try await restart { $0.requiresDPoPNonce = true }
        let client = try await register()
        let key = try DPoPTestKey()
        let (_, refreshToken) = try await mint(client, jkt: key.jkt)
        let url = server.oauthTokenEndpoint

        let noNonce = try await refresh(client, refreshToken, proof: key.proof("POST", url))
        XCTAssertEqual(noNonce.status, 400)
        XCTAssertEqual(try noNonce.object()["error"] as? String, "use_dpop_nonce")
        let nonce = try XCTUnwrap(noNonce.header("DPoP-Nonce"))
        let wrongNonce = try await refresh(client, refreshToken, proof: key.proof("POST", url, nonce: "made-up"))
        XCTAssertEqual(try wrongNonce.object()["error"] as? String, "use_dpop_nonce")
        XCTAssertEqual(wrongNonce.header("DPoP-Nonce"), nonce)

        let accepted = try await refresh(client, refreshToken, proof: key.proof("POST", url, nonce: nonce))
        XCTAssertEqual(accepted.status, 200, String(decoding: accepted.body, as: UTF8.self))
        XCTAssertEqual(accepted.header("DPoP-Nonce"), nonce)
        var current = try XCTUnwrap(try accepted.object()["refresh_token"] as? String)

        // After one rotation the previous nonce still works; after two it is refused.
        try await server.rotateDPoPNonces()
        let previous = try await refresh(client, current, proof: key.proof("POST", url, nonce: nonce))
        XCTAssertEqual(previous.status, 200)
        XCTAssertNotEqual(previous.header("DPoP-Nonce"), nonce)
        current = try XCTUnwrap(try previous.object()["refresh_token"] as? String)
        try await server.rotateDPoPNonces()
        let stale = try await refresh(client, current, proof: key.proof("POST", url, nonce: nonce))
        XCTAssertEqual(try stale.object()["error"] as? String, "use_dpop_nonce")
        let fresh = try XCTUnwrap(stale.header("DPoP-Nonce"))
        XCTAssertNotEqual(fresh, nonce)
        let retried = try await refresh(client, current, proof: key.proof("POST", url, nonce: fresh))
        XCTAssertEqual(retried.status, 200)
    }

    func testNoncesRotateByThemselvesAfterTheirLifetime() async throws {
        try await restart {
            $0.requiresDPoPNonce = true
            $0.dpopNonceLifetime = 60
        }
        let client = try await register()
        let key = try DPoPTestKey()
        let (_, refreshToken) = try await mint(client, jkt: key.jkt)
        let first = try await refresh(client, refreshToken, proof: key.proof("POST", server.oauthTokenEndpoint))
        let nonce = try XCTUnwrap(first.header("DPoP-Nonce"))
        clock.advance(61)
        let second = try await refresh(client, refreshToken, proof: key.proof("POST", server.oauthTokenEndpoint))
        XCTAssertEqual(try second.object()["error"] as? String, "use_dpop_nonce")
        XCTAssertNotEqual(second.header("DPoP-Nonce"), nonce)
    }

    // MARK: resource

    func testTheResourceChecksTheProofAndAth() async throws {
        let client = try await register()
        let key = try DPoPTestKey()
        let other = try DPoPTestKey()
        let (accessToken, _) = try await mint(client, jkt: key.jkt)
        let url = server.oauthUserinfoEndpoint
        func call(_ scheme: String = "DPoP", proof: String?) async throws -> HTTPResult {
            var headers = ["Authorization": "\(scheme) \(accessToken)"]
            if let proof { headers["DPoP"] = proof }
            return try await send("GET", url, headers: headers)
        }
        let ok = try await call(proof: key.proof("GET", url, accessToken: accessToken))
        XCTAssertEqual(ok.status, 200, String(decoding: ok.body, as: UTF8.self))
        XCTAssertEqual(try ok.object()["sub"] as? String, "alice")
        XCTAssertEqual(try ok.object()["client_id"] as? String, client.clientId)

        let cases: [(String, HTTPResult, String)] = [
            ("no ath", try await call(proof: key.proof("GET", url)), "invalid_dpop_proof"),
            ("wrong ath", try await call(proof: key.proof("GET", url, ath: "AAAA")), "invalid_dpop_proof"),
            ("other key", try await call(proof: other.proof("GET", url, accessToken: accessToken)), "invalid_dpop_proof"),
            ("no proof", try await call(proof: nil), "invalid_dpop_proof"),
            ("as Bearer", try await call("Bearer", proof: key.proof("GET", url, accessToken: accessToken)), "invalid_token"),
            ("wrong htm", try await call(proof: key.proof("POST", url, accessToken: accessToken)), "invalid_dpop_proof"),
        ]
        for (name, result, error) in cases {
            XCTAssertEqual(result.status, 401, name)
            XCTAssertEqual(result.header("WWW-Authenticate")?.contains("error=\"\(error)\""), true, name)
        }
        let info = try await tokenInfo(accessToken)
        XCTAssertEqual(info.presentations, 1 + cases.count)
    }

    func testTheResourceDemandsANonceWith401AndWWWAuthenticate() async throws {
        try await restart { $0.resourceRequiresDPoPNonce = true }
        let client = try await register()
        let key = try DPoPTestKey()
        let (accessToken, _) = try await mint(client, jkt: key.jkt)
        let url = server.oauthUserinfoEndpoint
        let first = try await send(
            "GET", url,
            headers: ["Authorization": "DPoP \(accessToken)", "DPoP": try key.proof("GET", url, accessToken: accessToken)])
        XCTAssertEqual(first.status, 401)
        let challenge = try XCTUnwrap(first.header("WWW-Authenticate"))
        XCTAssertTrue(challenge.hasPrefix("DPoP "), challenge)
        XCTAssertTrue(challenge.contains(#"error="use_dpop_nonce""#), challenge)
        let nonce = try XCTUnwrap(first.header("DPoP-Nonce"))
        let second = try await send(
            "GET", url,
            headers: [
                "Authorization": "DPoP \(accessToken)",
                "DPoP": try key.proof("GET", url, accessToken: accessToken, nonce: nonce),
            ])
        XCTAssertEqual(second.status, 200, String(decoding: second.body, as: UTF8.self))
        XCTAssertEqual(second.header("DPoP-Nonce"), nonce)
    }

    func testAnUnboundTokenIsUsedAsBearer() async throws {
        let client = try await register()
        let (accessToken, _) = try await mint(client)
        let bearer = try await send("GET", server.oauthUserinfoEndpoint, headers: ["Authorization": "Bearer \(accessToken)"])
        XCTAssertEqual(bearer.status, 200)
        let none = try await send("GET", server.oauthUserinfoEndpoint)
        XCTAssertEqual(none.status, 401)
        XCTAssertEqual(none.header("WWW-Authenticate")?.hasPrefix(#"DPoP algs="ES256""#), true)
    }

    func testAProofDoesNotCountAsAPrivateKeyCarrier() async throws {
        let client = try await register()
        let key = try DPoPTestKey()
        let (_, refreshToken) = try await mint(client, jkt: key.jkt)
        var withPrivate = key.jwk
        withPrivate.d = Base64URL.encode([UInt8](repeating: 1, count: 32))
        let result = try await refresh(client, refreshToken, proof: key.proof("POST", server.oauthTokenEndpoint, headerJWK: withPrivate))
        XCTAssertEqual(try result.object()["error"] as? String, "invalid_dpop_proof")
    }
}

/// Token introspection (RFC 7662) shows the binding (`cnf.jkt`, RFC 9449 §6.2).
final class OAuthIntrospectionTests: OAuthServerTestCase {
    func testIntrospectionShowsTheBindingAndDeadTokensAreInactive() async throws {
        let client = try await register()
        let key = try DPoPTestKey()
        let (bound, refreshToken) = try await mint(client, jkt: key.jkt)
        let (unbound, _) = try await mint(client)
        let auth = ["Authorization": basicAuthorization(client.clientId, client.clientSecret ?? "")]
        let boundInfo = try await sendForm(server.oauthIntrospectionEndpoint, [("token", bound)], headers: auth).object()
        XCTAssertEqual(boundInfo["active"] as? Bool, true)
        XCTAssertEqual(boundInfo["token_type"] as? String, "DPoP")
        XCTAssertEqual((boundInfo["cnf"] as? [String: Any])?["jkt"] as? String, key.jkt)
        XCTAssertEqual(boundInfo["sub"] as? String, "alice")
        let unboundInfo = try await sendForm(server.oauthIntrospectionEndpoint, [("token", unbound)], headers: auth).object()
        XCTAssertEqual(unboundInfo["token_type"] as? String, "Bearer")
        XCTAssertNil(unboundInfo["cnf"])

        _ = try await refresh(client, refreshToken, proof: key.proof("POST", server.oauthTokenEndpoint))
        let spent = try await sendForm(server.oauthIntrospectionEndpoint, [("token", refreshToken)], headers: auth).object()
        XCTAssertEqual(spent["active"] as? Bool, false)
        let anonymous = try await sendForm(server.oauthIntrospectionEndpoint, [("token", bound)])
        XCTAssertEqual(anonymous.status, 401)
    }
}
