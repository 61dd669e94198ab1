import ArgumentParser
import Foundation
import KeyManager
import Sync

/// `keymgr sign`: signs a server challenge with a user's key.
struct Sign: KeymgrCommand {
    static let configuration = CommandConfiguration(
        commandName: "sign",
        abstract: "Sign a challenge with a user's key and print the JWS.",
        discussion: """
            Picks the user's single active key (or the one --kid names), unlocks it as its auth type says, and \
            prints the compact JWS on stdout (with --json: {"kid", "jws"}). Without --challenge it signs a \
            random challenge it makes up, and says so on stderr.

            --claim NAME=VALUE adds a custom claim (repeatable). VALUE is a string; write json:VALUE for any \
            other JSON value, e.g. --claim amount=json:42 or --claim ctx='json:{"a":1}'. The claims sub, exp, \
            iat, nbf, iss and challenge are refused (status 65).

            With --journey, keymgr runs the PingAM signing journey on the configured server (`keymgr server set`): \
            it answers the NameCallback with the user's username (else --user) and a PasswordCallback, if any, \
            with the password from --password-fd N (else a no-echo prompt), then signs the challenge of the \
            server's DeviceSigningVerifierCallback and prints the JWS the server accepted. A usernameless journey \
            (the callback names no user) signs with the only key on this device, or the one --user or --kid \
            chooses. Any failure after the callback arrives is reported to the server as its clientError.

            --user takes the user id, the id= value of a universalId (dave for id=dave,ou=user,…) or the username.

            Example:
              printf '482916\\n' | keymgr sign --user alice --challenge "$CHALLENGE" \\
                --claim txn=4711 --pin-stdin
              keymgr sign --journey SignIn --user alice --claim purpose=door
            """)

    @OptionGroup var globals: GlobalOptions

    @Option(help: ArgumentHelp("Sign with this user's active key.", valueName: "id"),
            completion: .custom(StoreCompletion.users))
    var user: String?

    @Option(help: ArgumentHelp("Sign with this key.", valueName: "kid"), completion: .custom(StoreCompletion.kids))
    var kid: String?

    @Option(name: .customLong("claim"), help: ArgumentHelp("A custom claim; repeatable.", valueName: "name=value"))
    var claims: [String] = []

    @OptionGroup(title: "JWS") var jws: JWSOptions

    @OptionGroup(title: "PIN") var pin: PINOptions

    @OptionGroup(title: "Journey") var journey: JourneyOptions

    func validate() throws {
        if journey.journey != nil {
            try JourneyOptions.refuse(jws.decidedByTheServer)
        } else if user == nil && kid == nil {
            throw ValidationError("say whose key signs: --user NAME or --kid KID")
        }
        var names = Set<String>()
        for claim in claims {
            let name = try Self.split(claim).name
            guard names.insert(name).inserted else { throw ValidationError("the claim \(name) is given twice") }
        }
    }

    func run(in context: CommandContext) throws {
        let manager = try globals.openManager(in: context)
        let userId = try manager.resolveUser(user)
        var request = SignRequest(userId: userId, kid: kid)
        request.challenge = jws.challenge
        request.issuer = jws.issuer
        if let expiresIn = jws.expiresIn { request.expiresIn = expiresIn }
        if let timeout = jws.timeout { request.verifierTimeout = timeout }
        for claim in claims {
            let (name, value) = try Self.split(claim)
            request.claims[name] = try Self.claimValue(value, name: name)
        }

        if let name = journey.journey {
            return try sign(through: name, userId: userId, claims: request.claims, manager: manager, in: context)
        }
        let result = try manager.sign(request, pin: pin.source(in: context).current(for: user ?? kid ?? "the key"))
        let console = globals.console(in: context)
        if request.challenge == nil {
            console.warn("no --challenge given: signed a random challenge keymgr made up (a server checks its own challenge)")
        }
        try globals.render(SignatureOutput(result: result, confirmation: nil), in: context)
    }

    /// Signs through the journey `name`: the server's callback decides the user, the challenge and the lifetime.
    private func sign(through name: String, userId: String?, claims: [String: JSONValue], manager: KeyManager,
                      in context: CommandContext) throws {
        let connection = try ServerConnection.configured(in: manager, profile: journey.server.profile, environment: context.environment)
        let journeys = try JourneyService(manager: manager, connection: connection,
                                          logger: globals.logger(in: context))
        // The server knows its users by login name: the one stored with the user's keys, else --user itself.
        let login = try manager.login(forUser: userId, kid: kid)
        let password = journey.passwordSource(for: login, in: context)
        let (pinStdin, pinFd, kid) = (pin.pinStdin, pin.pinFd, kid)
        let prompt = user ?? kid ?? "the key"
        let result = try AsyncBridge.wait {
            try await journeys.sign(journey: name, username: login, password: { try password.read() },
                                    userId: userId, kid: kid, claims: claims,
                                    pin: { try PINSource.choose(stdin: pinStdin, fd: pinFd, in: context).current(for: prompt)() })
        }
        try globals.render(SignatureOutput(result: result, confirmation: "the server accepted the signature of key \(result.kid) in the journey \(name)"), in: context)
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
            throw CommandFailure(.badInput, "the claim \(name) is not valid JSON after `json:`")
        }
    }
}

/// `sign`: `{"kid","jws"}`, or the JWS alone (and, after a journey, a confirmation line).
struct SignatureOutput: DocumentOutput {
    let result: SignResult
    let confirmation: String?

    var document: SignatureJSON { SignatureJSON(result) }

    func text(on console: Console) {
        console.answer(result.jws)
        if let confirmation { console.confirm(confirmation) }
    }
}
