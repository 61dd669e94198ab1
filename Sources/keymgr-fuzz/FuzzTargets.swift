#if KEYMGR_FUZZ
// libFuzzer entry points for what keymgr parses from outside (issue 15). Built only by `make fuzz`
// (`-sanitize=fuzzer -parse-as-library`, debug so that `@testable import` reaches the parsers); in the normal
// build (no KEYMGR_FUZZ) the executable only has the empty `main` at the end. FUZZ_TARGET picks the parser; see
// proof/fuzz.sh.

import Foundation
@testable import KeyManager
@testable import ServerClients

/// The parsers under fuzz, by name. A new parser (token or registration responses, discovery, DPoP-Nonce,
/// WWW-Authenticate) is one more entry.
let fuzzTargets: [String: @Sendable ([UInt8]) -> Void] = [
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
            _ = try? callback.output("userId")
            _ = try? callback.output("challenge")
            _ = try? callback.jwsLifetime()
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
