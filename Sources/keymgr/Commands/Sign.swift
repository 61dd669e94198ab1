import ArgumentParser
import Foundation
import KeyManager

/// `keymgr sign`: signs a server challenge with a user's key.
struct Sign: KeymgrCommand {
    static let configuration = CommandConfiguration(
        abstract: "Sign a challenge with a user's key and print the JWS.",
        discussion: """
            Picks the user's single active key (or the one --kid names), unlocks it as its auth type says, and \
            prints the compact JWS on stdout (with --json: {"kid","jws"}).

            --claim NAME=VALUE adds a custom claim (repeatable). VALUE is a string; write json:VALUE for any \
            other JSON value, e.g. --claim amount=json:42 or --claim ctx='json:{"a":1}'. The claims sub, exp, \
            iat, nbf, iss and challenge are refused (status 65).

            Example:
              printf '482916\\n' | keymgr sign --user alice --challenge "$CHALLENGE" --claim txn=4711 --pin-stdin
            """)

    @OptionGroup var globals: GlobalOptions

    @Option(help: ArgumentHelp("Sign with this user's active key.", valueName: "id"))
    var user: String?

    @Option(help: ArgumentHelp("Sign with this key.", valueName: "kid"))
    var kid: String?

    @Option(help: ArgumentHelp("The server challenge to sign.", valueName: "c"))
    var challenge: String?

    @Option(name: .customLong("claim"), help: ArgumentHelp("A custom claim; repeatable.", valueName: "name=value"))
    var claims: [String] = []

    @Option(help: ArgumentHelp("The issuer (`iss`) of the JWS (default: the one given at init).", valueName: "iss"))
    var issuer: String?

    @Option(help: ArgumentHelp("Seconds until the JWS expires (default: 60).", valueName: "s"))
    var expiresIn: Int?

    @Option(help: ArgumentHelp(
        "Seconds to wait for the biometric or device-credential verifier before giving up (status 75; default: 60).",
        valueName: "s"))
    var timeout: Double?

    @OptionGroup(title: "PIN") var pin: PINOptions

    func validate() throws {
        if user == nil && kid == nil { throw ValidationError("say whose key signs: --user ID or --kid KID") }
        if let expiresIn, expiresIn < 1 { throw ValidationError("--expires-in must be 1 second or more") }
        if let timeout, !(timeout > 0) { throw ValidationError("--timeout must be more than 0 seconds") }
        var names = Set<String>()
        for claim in claims {
            let name = try Self.split(claim).name
            guard names.insert(name).inserted else { throw ValidationError("the claim \(name) is given twice") }
        }
    }

    func run() throws {
        var request = SignRequest(userId: user, kid: kid)
        request.challenge = challenge
        request.issuer = issuer
        if let expiresIn { request.expiresIn = expiresIn }
        if let timeout { request.verifierTimeout = timeout }
        for claim in claims {
            let (name, value) = try Self.split(claim)
            request.claims[name] = try Self.claimValue(value, name: name)
        }

        let manager = try globals.openManager()
        let result = try manager.sign(request, pin: pin.source().current(for: user ?? kid ?? "the key"))
        let console = globals.console
        if globals.json {
            console.answer(json: .object(["kid": .string(result.kid), "jws": .string(result.jws)]))
        } else {
            console.answer(result.jws)
        }
    }

    /// `NAME=VALUE` at the first `=`; the name must not be empty.
    static func split(_ claim: String) throws -> (name: String, value: String) {
        guard let equals = claim.firstIndex(of: "="), equals != claim.startIndex else {
            throw ValidationError("--claim needs NAME=VALUE, not '\(claim)'")
        }
        return (String(claim[..<equals]), String(claim[claim.index(after: equals)...]))
    }

    /// A claim value: the string itself, or after a `json:` prefix the JSON value it spells.
    static func claimValue(_ text: String, name: String) throws -> JSONValue {
        guard text.hasPrefix("json:") else { return .string(text) }
        let json = Data(text.dropFirst("json:".count).utf8)
        do {
            return try JSONDecoder().decode(JSONValue.self, from: json)
        } catch {
            throw KeyManagerError(.badInput, "the claim \(name) is not valid JSON after `json:`")
        }
    }
}
