import Foundation
import KeyManager
@testable import ServerClients
import XCTest

/// What keymgr parses from outside, fed what a hostile or broken server sends (issue 15): the regressions of
/// `make fuzz` and the header parsers it found missing.
final class HostileAnswerTests: XCTestCase {
    /// `expires_in` beyond Int64 (`1e300`) trapped in `Int64(Double)`: the process died on a token response.
    func testATokenResponseWithAnExpiryBeyondInt64IsNoTrap() throws {
        for expiry in ["1e300", "-1e300", "9.3e18", "2.9e19", "1.7976931348623157e308"] {
            let body = Data(#"{"access_token":"a","token_type":"Bearer","expires_in":\#(expiry)}"#.utf8)
            let tokens = try IssuedTokens.parse(body)
            XCTAssertNil(tokens.expiresIn, "an expiry no Int64 holds is unknown: \(expiry)")
        }
        XCTAssertEqual(try IssuedTokens.parse(Data(#"{"access_token":"a","token_type":"bearer","expires_in":299.9}"#.utf8)).expiresIn, 299)
        XCTAssertEqual(try IssuedTokens.parse(Data(#"{"access_token":"a","token_type":"DPoP","expires_in":"300"}"#.utf8)).expiresIn, 300)
    }

    /// An `interval` of 1e13 seconds overflowed the login's nanosecond wait (`UInt64(interval) * 1_000_000_000`), and
    /// Int64.max overflowed `interval += 5` after a `slow_down`: the interval is bounded when parsed.
    func testADeviceAuthorizationIntervalIsBounded() throws {
        for interval in ["10000000000000", "9223372036854775807", "0", "-5"] {
            let body = Data(#"{"device_code":"d","user_code":"U","verification_uri":"https://as.example.com/device","interval":\#(interval)}"#.utf8)
            let authorization = try DeviceAuthorization.parse(body)
            XCTAssertTrue((1...DeviceAuthorization.maximumInterval).contains(authorization.interval), "\(interval) -> \(authorization.interval)")
            XCTAssertFalse(UInt64(authorization.interval + 5).multipliedReportingOverflow(by: 1_000_000_000).overflow)
        }
        XCTAssertThrowsError(try DeviceAuthorization.parse(Data("<html>".utf8))) { error in
            XCTAssertEqual((error as? TransportError)?.message, "the device authorization answer is not a JSON object")
        }
    }

    func testWWWAuthenticateChallengesAreParsedByTheRFC() {
        let challenges = HTTPChallenge.parse(#"Bearer realm="api", error="invalid_token", error_description="expired \"soon\"", DPoP algs="ES256 PS256", error="use_dpop_nonce""#)
        XCTAssertEqual(challenges.map(\.scheme), ["Bearer", "DPoP"])
        XCTAssertEqual(challenges[0].parameters, ["realm": "api", "error": "invalid_token", "error_description": #"expired "soon""#])
        XCTAssertEqual(challenges[1].parameters, ["algs": "ES256 PS256", "error": "use_dpop_nonce"])
        XCTAssertEqual(HTTPChallenge.parse("Negotiate abc+/==, Basic realm=x"),
                       [HTTPChallenge(scheme: "Negotiate", token68: "abc+/=="), HTTPChallenge(scheme: "Basic", parameters: ["realm": "x"])])
        XCTAssertEqual(HTTPChallenge.parse("basic").first?.isScheme("Basic"), true)
        XCTAssertEqual(HTTPChallenge.parse(""), [])
        XCTAssertEqual(HTTPChallenge.parse(#", ,@@ ="#), [], "junk where a scheme belongs is skipped")
    }

    /// Before, any header merely containing the words counted: a Bearer challenge whose description mentions
    /// use_dpop_nonce is no nonce request, and a scheme named `Basically` is not Basic.
    func testOnlyARealDPoPNonceChallengeIsRetried() {
        func response(_ challenge: String) -> HTTPResponse {
            HTTPResponse(status: 401, headers: ["www-authenticate": challenge, "dpop-nonce": "n-1"])
        }
        XCTAssertTrue(OAuthTokenClient.asksForNonce(response(#"DPoP error="use_dpop_nonce", error_description="Resource server requires nonce in DPoP proof""#)))
        XCTAssertTrue(OAuthTokenClient.asksForNonce(response(#"Bearer realm="x", dpop error=use_dpop_nonce"#)))
        XCTAssertFalse(OAuthTokenClient.asksForNonce(response(#"Bearer error="invalid_token", error_description="not use_dpop_nonce""#)))
        let basically = OAuthTokenClient.tokenFailure(HTTPResponse(status: 401, headers: ["www-authenticate": "Basically nothing"]), doing: "refresh")
        XCTAssertNil(basically.oauthError)
        let basic = OAuthTokenClient.tokenFailure(HTTPResponse(status: 401, headers: ["www-authenticate": #"Basic realm="as""#]), doing: "refresh")
        XCTAssertEqual(basic.oauthError, .invalidClient)
    }

    /// RFC 9449 §8.1: a nonce is 1*NQCHAR. Anything else is not remembered (so never put into a proof).
    func testOnlyWellFormedDPoPNoncesAreRemembered() {
        let url = URL(string: "https://as.example.com/token")!
        for bad in ["", "two words", #"quote""#, "back\\slash", "caf\u{e9}", "a, b"] {
            let nonces = DPoPNonces()
            nonces.remember(HTTPResponse(status: 400, headers: ["dpop-nonce": bad]), from: url)
            XCTAssertNil(nonces.nonce(for: url), bad)
        }
        let nonces = DPoPNonces()
        nonces.remember(HTTPResponse(status: 400, headers: ["dpop-nonce": "eyJ7S_zG.8e-~!#[]"]), from: url)
        XCTAssertEqual(nonces.nonce(for: url), "eyJ7S_zG.8e-~!#[]")
    }

    func testDiscoveryMetadataIsReadWithoutTheNetwork() throws {
        let url = URL(string: "https://as.example.com/.well-known/openid-configuration")!
        let issuer = URL(string: "https://as.example.com")!
        let metadata = try OAuthDiscoveryClient.metadata(
            Data(#"{"issuer":"https://as.example.com/","token_endpoint":"https://as.example.com/t","registration_endpoint":7}"#.utf8),
            from: url, issuer: issuer)
        XCTAssertEqual(metadata.tokenEndpoint?.absoluteString, "https://as.example.com/t")
        XCTAssertNil(metadata.registrationEndpoint, "a number is no URL")
        XCTAssertThrowsError(try OAuthDiscoveryClient.metadata(Data(#"{"issuer":"https://evil.example.com"}"#.utf8), from: url, issuer: issuer))
    }

    /// `make fuzz` (http-header-lines): a CR and a NUL inside a header line stayed in the value keymgr reads. RFC 9110
    /// §5.5: CR, LF and NUL in a field value are replaced by SP; a line whose name is no token is not a header.
    func testHeaderLinesWithCRLFOrNULInsideAreCleaned() {
        let transfer = CurlHTTPClient.Transfer(maxBodyBytes: 1024)
        for line in ["HTTP/1.1 401 Unauthorized\r\n", "WWW-Authenticate: DPoP error=\"use_dpop_nonce\"\r\u{0}Set-Cookie: a=1\r\n",
                     "DPoP-Nonce: n-1\r\n", "Bad Name: x\r\n", "Retry\u{0}After: 5\r\n", ": empty\r\n"] {
            Array(line.utf8).withUnsafeBytes { transfer.append(headerLine: $0) }
        }
        XCTAssertEqual(transfer.headers["www-authenticate"], "DPoP error=\"use_dpop_nonce\"  Set-Cookie: a=1")
        XCTAssertEqual(transfer.headers["dpop-nonce"], "n-1")
        XCTAssertEqual(Set(transfer.headers.keys), ["www-authenticate", "dpop-nonce"], "no header from a line whose name is no token")
    }
}
