import Foundation
import KeyManager
import XCTest

@testable import RefServer

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Glibc)
import Glibc
#endif

/// The initial access token the OAuth test servers require for DCR.
let initialAccessToken = "test-initial-access-token"

/// A clock tests move by hand (device-grant intervals and expiry without sleeping).
final class ManualClock: @unchecked Sendable {
    private let lock = NSLock()
    private var current = Date()

    var now: Date { lock.withLock { current } }

    func advance(_ seconds: TimeInterval) { lock.withLock { current = current.addingTimeInterval(seconds) } }

    /// Back to the wall clock (XCTest makes every test case long before it runs).
    func reset() { lock.withLock { current = Date() } }
}

/// A DPoP key as a client holds it, making RFC 9449 proofs with keymgr's `JWS.sign`.
struct DPoPTestKey {
    let privateKey: P256PrivateKey

    init() throws { privateKey = try P256PrivateKey.generate() }

    /// The public JWK without `kid`, `use` and `alg`, as a DPoP header carries it.
    var jwk: JWK { privateKey.publicKey.jwk(kid: nil, use: nil, alg: nil) }

    /// The RFC 7638 thumbprint: the `jkt` the server binds tokens to.
    var jkt: String { (try? jwk.thumbprint()) ?? "" }

    /// A proof for `method` `url`; `ath` is computed from `accessToken`. Every part can be spoiled.
    func proof(
        _ method: String, _ url: URL, accessToken: String? = nil, nonce: String? = nil, jti: String = UUID().uuidString,
        issuedAt: Date = Date(), typ: String = "dpop+jwt", headerJWK: JWK? = nil, ath: String? = nil
    ) throws -> String {
        let header: [String: JSONValue] = ["typ": .string(typ), "alg": "ES256", "jwk": (headerJWK ?? jwk).jsonObject()]
        var claims: [String: JSONValue] = [
            "jti": .string(jti), "htm": .string(method), "htu": .string(url.absoluteString),
            "iat": .int(Int64(issuedAt.timeIntervalSince1970)),
        ]
        if let accessToken { claims["ath"] = .string(Base64URL.encode(SHA256.hash(Array(accessToken.utf8)))) }
        if let ath { claims["ath"] = .string(ath) }
        if let nonce { claims["nonce"] = .string(nonce) }
        return try JWS.sign(header: header, claims: claims, key: privateKey)
    }
}

/// A registered client as the tests keep it.
struct RegisteredClient {
    var clientId: String
    var clientSecret: String?
    var registrationClientURI: URL
    var registrationAccessToken: String
    var response: [String: Any]
}

/// Sends a form-encoded (`application/x-www-form-urlencoded`) request.
///
/// Over a plain socket rather than URLSession: a 401 with `WWW-Authenticate: Basic` (RFC 6749 §5.2
/// `invalid_client`) makes swift-corelibs-foundation wait forever for credentials (its issue #5456),
/// and a delegate can only cancel the task, losing the response.
func sendForm(
    _ url: URL, _ parameters: [(String, String)], method: String = "POST", headers: [String: String] = [:]
) async throws -> HTTPResult {
    let body = Data(parameters.map { "\(formEncode($0.0))=\(formEncode($0.1))" }.joined(separator: "&").utf8)
    var fields = headers
    fields["Content-Type"] = "application/x-www-form-urlencoded"
    let prepared = fields
    // Blocking socket calls on a thread of their own: on the concurrency pool they would starve the
    // in-process server, whose handlers need that pool too.
    return try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try rawHTTP(method, url, headers: prepared, body: body) }) }.start()
    }
}

/// One HTTP/1.1 exchange on a fresh loopback connection (`Connection: close`, read to EOF).
func rawHTTP(_ method: String, _ url: URL, headers: [String: String], body: Data) throws -> HTTPResult {
    let port = try XCTUnwrap(url.port)
    let target = url.path.isEmpty ? "/" : url.path + (url.query.map { "?" + $0 } ?? "")
    var head = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n"
    head += "Content-Length: \(body.count)\r\n"
    for (name, value) in headers { head += "\(name): \(value)\r\n" }
    let request = Data((head + "\r\n").utf8) + body

    let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard socket >= 0 else { throw POSIXError(.EIO) }
    defer { close(socket) }
    var timeout = timeval(tv_sec: 30, tv_usec: 0)
    setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
    }
    guard connected == 0 else { throw POSIXError(.ECONNREFUSED) }
    try request.withUnsafeBytes { buffer in
        var sent = 0
        while sent < buffer.count {
            let written = send(socket, buffer.baseAddress! + sent, buffer.count - sent, 0)
            guard written > 0 else { throw POSIXError(.EIO) }
            sent += written
        }
    }
    var response = Data()
    var chunk = [UInt8](repeating: 0, count: 65_536)
    while true {
        let count = recv(socket, &chunk, chunk.count, 0)
        if count <= 0 { break }
        response.append(contentsOf: chunk[0..<count])
    }
    let separator = Data("\r\n\r\n".utf8)
    let split = try XCTUnwrap(response.range(of: separator), "no complete HTTP response")
    let lines = String(decoding: response[..<split.lowerBound], as: UTF8.self).components(separatedBy: "\r\n")
    let status = try XCTUnwrap(Int(lines[0].split(separator: " ")[1]))
    var fields: [String: String] = [:]
    for line in lines.dropFirst() {
        guard let colon = line.firstIndex(of: ":") else { continue }
        let name = String(line[..<colon])
        let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        fields[name] = fields[name].map { "\($0), \(value)" } ?? value
    }
    var payload = Data(response[split.upperBound...])
    if let length = fields.first(where: { $0.key.lowercased() == "content-length" }).flatMap({ Int($0.value) }) {
        payload = payload.prefix(length)
    }
    return HTTPResult(status: status, headers: fields, body: payload)
}

/// `application/x-www-form-urlencoded` encoding of one name or value.
func formEncode(_ text: String) -> String {
    var allowed = CharacterSet.alphanumerics
    allowed.insert(charactersIn: "-._*")
    return (text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text).replacingOccurrences(of: "%20", with: "+")
}

/// `Authorization: Basic` for client_secret_basic (id and secret form-encoded first, RFC 6749 §2.3.1).
func basicAuthorization(_ clientId: String, _ secret: String) -> String {
    "Basic " + Data("\(formEncode(clientId)):\(formEncode(secret))".utf8).base64EncodedString()
}

/// A server test case with an authorization server that requires `initialAccessToken`.
class OAuthServerTestCase: ServerTestCase {
    let clock = ManualClock()
    /// The OAuth settings the next `setUp` / `restart` uses.
    var oauthConfiguration = OAuthServerConfiguration(initialAccessTokens: [initialAccessToken])

    override func setUp() async throws {
        clock.reset()
        try await super.setUp()
    }

    override func makeConfiguration(databasePath: String) -> ReferenceServerConfiguration {
        let clock = self.clock
        return ReferenceServerConfiguration(
            databasePath: databasePath, adminToken: adminToken, clock: { clock.now }, oauth: oauthConfiguration)
    }

    /// Restarts the server on the same database with changed OAuth settings.
    func restart(_ change: (inout OAuthServerConfiguration) -> Void) async throws {
        change(&oauthConfiguration)
        await server.stop()
        server = try await ReferenceServer.start(configuration: makeConfiguration(databasePath: databasePath))
    }

    /// Registers a client from the `keymgr-template` template (or `body`), asserting 201.
    func register(
        _ body: [String: Any] = ["software_id": "keymgr-template"], file: StaticString = #filePath, line: UInt = #line
    ) async throws -> RegisteredClient {
        let result = try await send(
            "POST", server.oauthRegistrationEndpoint, headers: ["Authorization": "Bearer \(initialAccessToken)"],
            json: body)
        XCTAssertEqual(result.status, 201, String(decoding: result.body, as: UTF8.self), file: file, line: line)
        return try client(from: result.object())
    }

    func client(from object: [String: Any]) throws -> RegisteredClient {
        RegisteredClient(
            clientId: try XCTUnwrap(object["client_id"] as? String), clientSecret: object["client_secret"] as? String,
            registrationClientURI: try XCTUnwrap(URL(string: try XCTUnwrap(object["registration_client_uri"] as? String))),
            registrationAccessToken: try XCTUnwrap(object["registration_access_token"] as? String), response: object)
    }

    /// Mints a token set for the client (as if a login happened); returns `(access, refresh)`.
    func mint(_ client: RegisteredClient, subject: String = "alice", jkt: String? = nil) async throws -> (String, String) {
        let response = try await server.mintOAuthTokens(clientId: client.clientId, subject: subject, jkt: jkt)
        return (try XCTUnwrap(response["access_token"]?.stringValue), try XCTUnwrap(response["refresh_token"]?.stringValue))
    }

    /// A refresh with client_secret_basic, optionally with a DPoP proof.
    func refresh(_ client: RegisteredClient, _ refreshToken: String, proof: String? = nil) async throws -> HTTPResult {
        var headers = ["Authorization": basicAuthorization(client.clientId, client.clientSecret ?? "")]
        if let proof { headers["DPoP"] = proof }
        return try await sendForm(
            server.oauthTokenEndpoint, [("grant_type", "refresh_token"), ("refresh_token", refreshToken)],
            headers: headers)
    }

    /// The admin view of one token.
    func tokenInfo(_ token: String) async throws -> OAuthTokenInfo {
        let tokens = try await server.oauthTokens()
        return try XCTUnwrap(tokens.first { $0.token == token })
    }
}
