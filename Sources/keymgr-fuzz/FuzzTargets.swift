#if KEYMGR_FUZZ
// libFuzzer entry points for what keymgr parses from outside (issue 15). Built only by `make fuzz`
// (`-sanitize=fuzzer -parse-as-library`, debug so that `@testable import` reaches the parsers); in the normal
// build (no KEYMGR_FUZZ) the executable only has the empty `main` at the end. FUZZ_TARGET picks the parser; see
// proof/fuzz.sh.

import Foundation
@testable import KeyManager
@testable import ServerClients
import Storage
import AgentWire

/// The parsers under fuzz, by name. A new parser is one more entry (and one more name in proof/fuzz.sh).
let fuzzTargets: [String: @Sendable ([UInt8]) -> Void] = [
    // The agent's policy file (docs/agent-policy.md), as `keymgr agent` and `--check-policy` read it: TOMLKit's
    // reading, the line index beside it, and the rules. A refusal is always `config` naming a line of the file; every
    // line the index gives is one the file has; the index reads any text (also text TOMLKit refuses) to its end.
    "policy-toml": { bytes in
        let text = String(decoding: bytes, as: UTF8.self)
        let lines = 1 + text.unicodeScalars.filter { $0 == "\n" }.count
        let paths: Set<String> = ["status", "users", "list", "bind", "rebind", "sign", "revoke", "pin change", "admin revoke"]
        func checkRefusal(_ error: any Error) {
            guard let failure = error as? KeyManagerError, failure.code == .config,
                  failure.message.hasPrefix("policy.toml:"),
                  let number = Int(failure.message.dropFirst("policy.toml:".count).prefix { $0.isNumber }),
                  (1...lines).contains(number) else {
                fatalError("a policy refusal names no line of the file: \(error)")
            }
        }
        guard PolicyTOMLLines(text).lines.values.allSatisfy({ (1...lines).contains($0) }) else {
            fatalError("the line index gives a line the file does not have")
        }
        _ = PolicyTOMLLines.unclosed(text, errorLine: 1 + Int(bytes.first ?? 0) % lines)
        do {
            _ = try PolicyTOML.parse(text, file: "policy.toml")
        } catch {
            checkRefusal(error)
        }
        do {
            _ = try AgentPolicy(parsing: text, file: "policy.toml", commandPaths: paths)
        } catch {
            checkRefusal(error)
        }
    },
    // A token endpoint's answer: a success (RFC 6749 §5.1) as `token refresh` and `login` parse it, and the same
    // bytes as an error answer (§5.2), with and without a Basic challenge.
    "token-response": { bytes in
        let body = Data(bytes)
        if let tokens = try? IssuedTokens.parse(body) {
            guard !tokens.accessToken.isEmpty, tokens.tokenType == "DPoP" || tokens.tokenType == "Bearer" else {
                fatalError("a token response was accepted without an access token or a known token type")
            }
            _ = tokens.expiresIn.map { Date().addingTimeInterval(TimeInterval($0)) }
        }
        for status in [400, 401, 503] {
            let response = HTTPResponse(status: status, headers: ["www-authenticate": "Basic realm=\"as\""], body: body)
            _ = OAuthTokenClient.tokenFailure(response, doing: "refresh the tokens")
            _ = OAuthWire.errorAnswer(response)
        }
        if let authorization = try? DeviceAuthorization.parse(body) {
            // The login waits interval seconds in nanoseconds and adds 5 on slow_down.
            guard (1...DeviceAuthorization.maximumInterval).contains(authorization.interval) else {
                fatalError("device authorization interval \(authorization.interval) out of bounds")
            }
        }
    },
    // A registration answer (RFC 7591 §3.2.1 / RFC 7592 read) as `dcr register` and sync's rule 5 read it, up to the
    // values the store keeps and shows.
    "registration-response": { bytes in
        let url = URL(string: "https://as.example.com/dcr")!
        guard let answer = try? OAuthRegistrationClient.clientInformation(HTTPResponse(status: 201, body: Data(bytes)), from: url),
              let parsed = try? KeyManager.RegistrationAnswer(answer) else { return }
        if parsed.clientSecret != nil, parsed.extra["client_secret"] != nil {
            fatalError("the client secret would be kept in the plain metadata column")
        }
        let now = Date()
        let record = RegistrationRecord(
            userId: "alice", serverName: "default", clientId: parsed.clientId, sealedClientSecret: nil,
            sealedRegistrationAccessToken: nil, registrationClientUri: parsed.registrationClientURI,
            clientIdIssuedAt: parsed.clientIdIssuedAt, clientSecretExpiresAt: parsed.clientSecretExpiresAt,
            tokenEndpointAuthMethod: parsed.tokenEndpointAuthMethod, grantTypes: parsed.grantTypes, scope: parsed.scope,
            softwareId: parsed.softwareId, metadata: JSONValue.object(parsed.extra).canonicalJSON(), status: "active",
            createdAt: now, updatedAt: now)
        let registration = KeyManager.registration(record)
        _ = registration.clientIdIssuedAt.map(ISOTime.string(from:))
        _ = registration.clientSecretExpiresAt.map(ISOTime.string(from:))
    },
    // An authorization server's metadata document (RFC 8414 / OpenID discovery) for `server set --issuer`.
    "discovery": { bytes in
        let issuer = URL(string: "https://as.example.com/oauth/v2/oauth-anonymous")!
        let source = URL(string: "https://as.example.com/.well-known/oauth-authorization-server/oauth/v2/oauth-anonymous")!
        _ = try? OAuthDiscoveryClient.metadata(Data(bytes), from: source, issuer: issuer)
    },
    // `DPoP-Nonce`: a nonce keymgr remembers must come back unchanged in the next proof's `nonce` claim.
    "dpop-nonce": { bytes in
        let text = String(decoding: bytes, as: UTF8.self)
        let url = URL(string: "https://as.example.com/token")!
        let nonces = DPoPNonces()
        nonces.remember(HTTPResponse(status: 400, headers: ["dpop-nonce": text]), from: url)
        guard let nonce = nonces.nonce(for: url) else { return }
        guard let proof = try? fuzzDPoPKey?.proof(htm: "POST", htu: url, nonce: nonce, accessToken: nil),
              let decoded = try? JWS.decode(proof) else {
            fatalError("no proof for the remembered nonce \(nonce.debugDescription)")
        }
        guard decoded.claims["nonce"]?.stringValue == nonce else {
            fatalError("the nonce \(nonce.debugDescription) changed on its way into the proof")
        }
    },
    // `WWW-Authenticate` (RFC 9110 §11.6.1): the challenges, and the two decisions keymgr takes from them.
    "www-authenticate": { bytes in
        let header = String(decoding: bytes, as: UTF8.self)
        for challenge in HTTPChallenge.parse(header) {
            guard !challenge.scheme.isEmpty, challenge.scheme.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != 0x2C && $0 != 0x3D }) else {
                fatalError("challenge scheme \(challenge.scheme.debugDescription) is not a token")
            }
        }
        let response = HTTPResponse(status: 401, headers: ["www-authenticate": header, "dpop-nonce": "n"])
        _ = OAuthTokenClient.asksForNonce(response)
        _ = OAuthTokenClient.tokenFailure(response, doing: "refresh the tokens")
    },
    // Response header lines as libcurl hands them over, one call per line.
    "http-header-lines": { bytes in
        let transfer = CurlHTTPClient.Transfer(maxBodyBytes: 1 << 16)
        var start = 0
        for (index, byte) in bytes.enumerated() where byte == 0x0A {
            bytes[start...index].withUnsafeBytes { transfer.append(headerLine: $0) }
            start = index + 1
        }
        bytes[start...].withUnsafeBytes { transfer.append(headerLine: $0) }
        for (name, value) in transfer.headers {
            guard name == name.lowercased(), !name.contains(":"), !value.contains("\r"), !value.contains("\n") else {
                fatalError("header \(name.debugDescription): \(value.debugDescription) kept a separator")
            }
        }
    },
    // PingAM's device listing, as `sync` reads each page.
    "device-listing": { bytes in
        _ = try? PingAMDeviceClient.decodePage(Data(bytes))
    },
    // A journey step: the callbacks keymgr reads outputs from and writes inputs into.
    "journey-callbacks": { bytes in
        guard let step = try? JSONDecoder().decode(JSONValue.self, from: Data(bytes)),
              let callbacks = step["callbacks"]?.arrayValue else { return }
        for raw in callbacks {
            let callback = JourneyCallback(raw)
            _ = callback.type
            let view = callback.view
            _ = try? view.output("userId")
            _ = try? view.output("challenge")
            _ = try? view.jwsLifetime()
            _ = view.operationTimeout
            callback.setFirstInput(.string("alice"))
            callback.set("jws", .string("a.b.c"))
            _ = callback.json.canonicalJSON()
        }
    },
    // A compact JWS (as `sign --journey` and the server hand them around) and a JWK inside it.
    "jws-jwk": { bytes in
        let text = String(decoding: bytes, as: UTF8.self)
        if let decoded = try? JWS.decode(text) {
            if let jwk = decoded.header["jwk"], let parsed = try? JWK(jsonObject: jwk) {
                if let key = try? P256PublicKey(jwk: parsed) { _ = try? JWS.verify(text, publicKey: key) }
            }
        }
        if let object = JSONValue.parseObject(bytes), let jwk = try? JWK(jsonObject: .object(object)) {
            _ = try? P256PublicKey(jwk: jwk)
            _ = jwk.jsonObject().canonicalJSON()
        }
    },
    // JSONValue: whatever decodes must survive canonical encoding and decode back to the same value.
    "json-value": { bytes in
        guard let value = try? JSONDecoder().decode(JSONValue.self, from: Data(bytes)) else { return }
        let canonical = value.canonicalJSON()
        guard let again = try? JSONDecoder().decode(JSONValue.self, from: Data(canonical.utf8)) else {
            fatalError("canonicalJSON wrote text JSONValue cannot read back: \(canonical)")
        }
        if again != value, !value.containsNonFiniteOrLossyNumber {
            fatalError("canonicalJSON changed the value: \(canonical)")
        }
    },
    // The agent's request frame (docs/agent-protocol.md) as the agent reads it from a client it does not trust:
    // header, then body. What AgentWire accepts must be a request the agent can act on, must read the same once
    // re-encoded, and must be JSON Foundation reads the same way (no second reader could see other arguments).
    // The same bytes as a response, as the client reads it.
    "agent-request": { bytes in
        guard bytes.count >= 4, let length = try? AgentWire.bodyLength(header: bytes.prefix(4)) else { return }
        let body = Array(bytes.dropFirst(4).prefix(length))
        if let response = try? AgentResponse.decode(body) {
            guard (0...255).contains(response.status), (try? AgentResponse.decode(response.encoded())) == response else {
                fatalError("a response does not survive re-encoding: \(response)")
            }
        }
        guard let request = try? AgentRequest.decode(body) else { return }
        guard request.fds.count <= AgentWire.maximumDescriptors, Set(request.fds).count == request.fds.count,
              [0, 1, 2].allSatisfy(request.fds.contains),
              request.fds.allSatisfy({ (0...AgentWire.maximumDescriptorNumber).contains($0) }),
              !request.arguments.contains(where: { $0.utf8.contains(0) }),
              (1...AgentWire.maximumColumns).contains(request.columns ?? 1),
              request.files.count <= AgentWire.maximumNamedFiles,
              Set(request.files.map(\.option)).count == request.files.count,
              request.files.allSatisfy({ $0.option.hasPrefix("--") && !$0.path.isEmpty && !$0.path.utf8.contains(0) })
        else { fatalError("a request the agent cannot act on was accepted: \(request)") }
        guard (try? AgentRequest.decode(request.encoded())) == request else {
            fatalError("a request does not survive re-encoding: \(request)")
        }
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
              let arguments = object["arguments"] as? [String], arguments == request.arguments
        else { fatalError("AgentWire accepted a body Foundation reads differently: \(String(decoding: body, as: UTF8.self))") }
    },
    // The CLI's own inputs: a `--claim NAME=VALUE` value after `json:` (the decoder `sign` uses and the
    // reserved-name check), and user ids as they become one path segment of the device REST.
    "cli-inputs": { bytes in
        let text = String(decoding: bytes, as: UTF8.self)
        if let value = try? JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)) {
            _ = try? JOSEClaims.checkCustomClaims(["claim": value])
        }
        let segment = PingAMDeviceClient.userSegment(text)
        if segment.contains(where: { $0 == "/" || $0 == "?" || $0 == "#" || $0 == "." || $0 == " " }) {
            fatalError("user id \(text.debugDescription) became a segment that changes the path: \(segment)")
        }
        if segment.removingPercentEncoding != PingAMDeviceClient.serverUserId(text) {
            fatalError("user id \(text.debugDescription) does not round-trip through its path segment \(segment)")
        }
    },
]

/// One DPoP key for every run of the `dpop-nonce` target (generating one per input would measure OpenSSL).
let fuzzDPoPKey = try? DPoPKey.generate()

extension JSONValue {
    /// Doubles may legitimately print differently (e.g. 1e400, -0.0); the round trip is only exact without them.
    var containsNonFiniteOrLossyNumber: Bool {
        switch self {
        case .double: return true
        case .array(let items): return items.contains { $0.containsNonFiniteOrLossyNumber }
        case .object(let members): return members.values.contains { $0.containsNonFiniteOrLossyNumber }
        default: return false
        }
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let name = ProcessInfo.processInfo.environment["FUZZ_TARGET"] ?? ""
    guard let target = fuzzTargets[name] else {
        fatalError("set FUZZ_TARGET to one of \(fuzzTargets.keys.sorted().joined(separator: ", "))")
    }
    let bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    target(bytes)
    return 0
}
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt) -> CInt

/// SwiftPM names an executable's entry point `<module>_main`: whichever `main` the link keeps (libFuzzer's or
/// this one), the fuzzer runs `fuzzOneInput`.
@_cdecl("keymgr_fuzz_main")
public func keymgrFuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var vector = argv
    return LLVMFuzzerRunDriver(&count, &vector, fuzzOneInput)
}
#else
/// The normal build's stand-in: libFuzzer brings `main` only in the fuzzing build.
@main
enum FuzzTargetsNotBuilt {
    static func main() {
        print("keymgr-fuzz is built for fuzzing by `make fuzz` only")
    }
}
#endif
