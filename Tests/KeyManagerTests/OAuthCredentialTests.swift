import Foundation
import GRDB
@testable import KeyManager
import Storage
import XCTest

/// Registrations, tokens and DPoP keys in the store: sealed per row, kept through rotation, gone when discarded.
final class OAuthCredentialTests: KeyManagerTestCase {
    private func configure() throws {
        try manager.configureServer(ServerSettings(dialect: .oauth, baseURL: URL(string: "https://as.example.com")!))
    }

    private let answer: [String: JSONValue] = [
        "client_id": "c-1", "client_secret": "secret-one", "registration_access_token": "rat-one",
        "registration_client_uri": "https://as.example.com/dcr/c-1", "client_id_issued_at": 1_795_000_000,
        "client_secret_expires_at": 0, "token_endpoint_auth_method": ["client_secret_post", "client_secret_basic"],
        "grant_types": ["refresh_token"], "scope": "openid read", "software_id": "tpl", "x_vendor": ["a": 1],
    ]

    func testRegistrationRoundTripRotationAndSealing() throws {
        try configure()
        let saved = try manager.saveRegistration(userId: "alice", serverName: "default", answer: answer)
        XCTAssertEqual(saved.clientId, "c-1")
        XCTAssertEqual(saved.tokenEndpointAuthMethod, "client_secret_basic", "an array: basic preferred")
        XCTAssertEqual(saved.grantTypes, ["refresh_token"])
        XCTAssertNil(saved.clientSecretExpiresAt, "0 means never")
        XCTAssertEqual(saved.metadata["x_vendor"], ["a": 1])
        XCTAssertNil(saved.metadata["client_secret"])
        XCTAssertEqual(try manager.registrationSecrets(userId: "alice", serverName: "default"),
                       RegistrationSecrets(clientSecret: "secret-one", registrationAccessToken: "rat-one"))

        // A read that rotated both credentials stores the new pair; what it leaves out keeps its value.
        try manager.saveRegistration(userId: "alice", serverName: "default", answer: [
            "client_id": "c-1", "client_secret": "secret-two", "registration_access_token": "rat-two",
        ], event: "dcr.read")
        XCTAssertEqual(try manager.registrationSecrets(userId: "alice", serverName: "default"),
                       RegistrationSecrets(clientSecret: "secret-two", registrationAccessToken: "rat-two"))
        XCTAssertEqual(try manager.registration(userId: "alice", serverName: "default")?.scope, "openid read")

        // A sealed secret copied into another user's row does not open there.
        try manager.saveRegistration(userId: "bob", serverName: "default", answer: ["client_id": "c-2", "client_secret": "bob-secret"])
        let database = try rawConnection()
        try database.write { db in
            try db.execute(sql: """
                UPDATE registrations SET sealed_client_secret =
                  (SELECT sealed_client_secret FROM registrations WHERE user_id = 'alice') WHERE user_id = 'bob'
                """)
        }
        XCTAssertThrowsError(try manager.registrationSecrets(userId: "bob", serverName: "default"))

        let text = try Data(contentsOf: home.home.databaseURL)
        XCTAssertNil(text.range(of: Data("secret-two".utf8)), "no plaintext secret in the database file")
    }

    func testTokensAndDPoPKeySurviveMasterRotationAndAreDiscardedTogether() throws {
        try configure()
        let key = try DPoPKey.generate()
        let stored = try manager.storeTokens(
            userId: "alice", serverName: "default", clientId: "c-1",
            issued: IssuedTokens(accessToken: "at-1", tokenType: "DPoP", expiresIn: 300, refreshToken: "rt-1", idToken: nil, scope: "read"),
            dpopKey: key, event: "tokens.login")
        XCTAssertTrue(stored.bound)
        XCTAssertEqual(stored.jkt, key.thumbprint)

        // A refresh answer without a refresh token keeps the old one (RFC 6749 §6); the revision changes.
        let refreshed = try manager.storeTokens(
            userId: "alice", serverName: "default", clientId: "c-1",
            issued: IssuedTokens(accessToken: "at-2", tokenType: "DPoP", expiresIn: 300, refreshToken: nil, idToken: nil, scope: nil),
            dpopKey: key, event: "tokens.refreshed")
        XCTAssertNotEqual(refreshed.revision, stored.revision)
        XCTAssertEqual(refreshed.scope, "read", "no scope in the answer: the granted one stays (RFC 6749 §5.1)")
        XCTAssertEqual(try manager.tokenSecrets(userId: "alice", serverName: "default"),
                       TokenSecrets(accessToken: "at-2", refreshToken: "rt-1", idToken: nil))

        let rotation = try manager.rotateMasterKey()
        XCTAssertGreaterThanOrEqual(rotation.secretsRewrapped, 3, "access, refresh and DPoP key re-wrapped")
        let reopened = try reopen()
        XCTAssertEqual(try reopened.tokenSecrets(userId: "alice", serverName: "default").accessToken, "at-2")
        XCTAssertEqual(try reopened.dpopKey(userId: "alice", serverName: "default")?.thumbprint, key.thumbprint)

        XCTAssertTrue(try reopened.discardTokens(userId: "alice", serverName: "default", reason: "invalid_grant"))
        // Neither the DPoP private key (raw or base64url) nor a token string is readable in the files.
        var files = Data()
        for suffix in ["", "-wal", "-shm"] {
            files += (try? Data(contentsOf: URL(fileURLWithPath: home.home.databaseURL.path + suffix))) ?? Data()
        }
        let raw = key.privateKey.rawRepresentation.bytes
        for needle in [Data(raw), Data(Base64URL.encode(raw).utf8), Data("at-1".utf8), Data("at-2".utf8), Data("rt-1".utf8)] {
            XCTAssertNil(files.range(of: needle))
        }
        XCTAssertNil(try reopened.tokenSet(userId: "alice", serverName: "default"))
        XCTAssertNil(try reopened.dpopKey(userId: "alice", serverName: "default"))
        XCTAssertFalse(try reopened.discardTokens(userId: "alice", serverName: "default", reason: "again"))
    }

    func testDPoPProofShape() throws {
        let key = try DPoPKey.generate()
        let proof = try key.proof(htm: "post", htu: URL(string: "https://as.example.com/token?a=1#b")!, nonce: "n-1",
                                  accessToken: "at-1", at: Date(timeIntervalSince1970: 1_795_000_000))
        let decoded = try JWS.verify(proof, publicKey: key.privateKey.publicKey)
        XCTAssertEqual(decoded.header["typ"], "dpop+jwt")
        XCTAssertEqual(decoded.header["jwk"]?["d"], nil, "no private member in the header")
        XCTAssertEqual(decoded.claims["htm"], "POST")
        XCTAssertEqual(decoded.claims["htu"], "https://as.example.com/token")
        XCTAssertEqual(decoded.claims["iat"], .int(1_795_000_000))
        XCTAssertEqual(decoded.claims["nonce"], "n-1")
        XCTAssertEqual(decoded.claims["ath"], .string(Base64URL.encode(SHA256.hash(Array("at-1".utf8)))))
        let other = try key.proof(htm: "POST", htu: URL(string: "https://as.example.com/token")!, nonce: nil, accessToken: nil)
        XCTAssertNotEqual(try JWS.decode(other).claims["jti"], decoded.claims["jti"], "a fresh jti per proof")
        XCTAssertNil(try JWS.decode(other).claims["nonce"])
    }

    /// A process that loaded the master key before a `master rotate` elsewhere committed (make stress's soak: a
    /// token refresh racing a rotation) stores its tokens and registration under the new key, and reads them.
    func testTokensAndRegistrationsStoredByAProcessThatMissedARotationOpenUnderTheNewKey() throws {
        try configure()
        try manager.saveRegistration(userId: "alice", serverName: "default", answer: answer)
        let key = try DPoPKey.generate()
        try manager.storeTokens(
            userId: "alice", serverName: "default", clientId: "c-1",
            issued: IssuedTokens(accessToken: "at-1", tokenType: "DPoP", expiresIn: 300, refreshToken: "rt-1", idToken: nil, scope: "read"),
            dpopKey: key, event: "tokens.login")
        let writer = try reopen()  // loaded the key before the rotation
        let reader = try reopen()
        _ = try manager.rotateMasterKey()

        XCTAssertEqual(try reader.tokenSecrets(userId: "alice", serverName: "default").accessToken, "at-1",
                       "a rotation elsewhere is not tampering")
        XCTAssertEqual(try reader.registrationSecrets(userId: "alice", serverName: "default").clientSecret, "secret-one")
        XCTAssertEqual(try reader.dpopKey(userId: "alice", serverName: "default")?.thumbprint, key.thumbprint)

        try writer.storeTokens(
            userId: "alice", serverName: "default", clientId: "c-1",
            issued: IssuedTokens(accessToken: "at-2", tokenType: "DPoP", expiresIn: 300, refreshToken: "rt-2", idToken: nil, scope: "read"),
            dpopKey: key, event: "tokens.refreshed")
        try writer.saveRegistration(userId: "alice", serverName: "default", answer: [
            "client_id": "c-1", "client_secret": "secret-two", "registration_access_token": "rat-two",
        ], event: "dcr.read")
        let fresh = try reopen()
        XCTAssertEqual(try fresh.tokenSecrets(userId: "alice", serverName: "default"),
                       TokenSecrets(accessToken: "at-2", refreshToken: "rt-2", idToken: nil))
        XCTAssertEqual(try fresh.dpopKey(userId: "alice", serverName: "default")?.thumbprint, key.thumbprint)
        XCTAssertEqual(try fresh.registrationSecrets(userId: "alice", serverName: "default"),
                       RegistrationSecrets(clientSecret: "secret-two", registrationAccessToken: "rat-two"))
    }
}
