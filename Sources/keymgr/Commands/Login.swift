import ArgumentParser
import Foundation
import KeyManager
import Sync

/// `keymgr dpop proof`: a DPoP proof (RFC 9449) by a user's DPoP key, for a script's own request.
struct Dpop: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dpop",
        abstract: "Make DPoP proofs with a user's DPoP key.",
        subcommands: [Proof.self])

    @OptionGroup var globals: GlobalOptions

    struct Proof: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "proof",
            abstract: "Print a DPoP proof for one request.",
            usage: "keymgr dpop proof [<options>] --user <id> --htm <method> --htu <url>",
            discussion: """
                The proof carries jti, htm, htu (without query or fragment), iat, and with --nonce the server's \
                nonce, with --access-token-stdin the access token's hash (ath). With --json: {"proof","jkt"}.

                Example:
                  keymgr token print --user alice | keymgr dpop proof --user alice --htm GET \\
                    --htu https://api.example.com/orders --access-token-stdin
                """)

        @OptionGroup var globals: GlobalOptions

        @OptionGroup var server: ProfileOptions

        @Option(help: ArgumentHelp("The user.", valueName: "id"), completion: .custom(StoreCompletion.users))
        var user: String

        @Option(help: ArgumentHelp("The request's HTTP method.", valueName: "method"))
        var htm: String

        @Option(help: ArgumentHelp("The request's URL.", valueName: "url"))
        var htu: String

        @Option(help: ArgumentHelp("The server's latest DPoP-Nonce.", valueName: "nonce"))
        var nonce: String?

        @Flag(help: "Read the access token from stdin and add its hash (ath).")
        var accessTokenStdin = false

        func validate() throws {
            guard !htm.isEmpty, htm.allSatisfy({ $0.isLetter }) else { throw ValidationError("--htm must be an HTTP method such as GET") }
            guard let url = URL(string: htu), let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https",
                  url.host != nil else { throw ValidationError("--htu must be an http or https URL") }
        }

        func run(in context: CommandContext) throws {
            var accessToken: String?
            if accessTokenStdin {
                let text = String(decoding: context.readInput(), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
                guard !text.isEmpty, !text.contains("\n") else {
                    throw CommandFailure(.badInput, "stdin must hold one access token on one line")
                }
                accessToken = text
            }
            guard let url = URL(string: htu) else { throw CommandFailure(.usage, "--htu must be a URL") }
            let manager = try globals.openManager(in: context)
            let connection = try ServerConnection.configured(in: manager, profile: server.profile, environment: context.environment)
            let service = TokenService(manager: manager, connection: connection, home: globals.storeHome(in: context), logger: globals.logger(in: context))
            let proof = try service.proof(userId: user, htm: htm, htu: url, nonce: nonce, accessToken: accessToken)
            try globals.render(ProofOutput(proof: proof, jkt: { try manager.tokenSet(userId: user, serverName: connection.serverName)?.jkt }), in: context)
        }
    }
}

/// `keymgr login`: the device authorization grant (RFC 8628).
struct Login: KeymgrCommand {
    static let configuration = CommandConfiguration(
        commandName: "login",
        abstract: "Log a user in through the device authorization grant (no browser needed here).",
        usage: "keymgr login [<options>] --user <id> [--scope <scope>]",
        discussion: """
            Prints a verification URI and a user code on stderr: open the URI on any other device (a phone), enter \
            the code and approve. keymgr polls at the server's interval and stores the tokens, bound to a new DPoP \
            key when the profile is --bound (a server that answers with Bearer tokens then is refused, exit 76: \
            choose --unbound for a server without DPoP). Ctrl-C stops waiting; nothing is stored until the server \
            answers with tokens. The user needs a client registration first (`keymgr dcr register`). With --json prints the \
            `token show` object (tokens null).

            Example:
              keymgr login --user alice --scope "openid read"
            """)

    @OptionGroup var globals: GlobalOptions

    @Option(help: ArgumentHelp("The user.", valueName: "id"), completion: .custom(StoreCompletion.users))
    var user: String

    @Option(help: ArgumentHelp("The scope to ask for (default: the registration's).", valueName: "scope"))
    var scope: String?

    @OptionGroup var network: NetworkOptions

    func run(in context: CommandContext) throws {
        let oauth = try OAuthContext(globals, profile: network.profile, timeout: network.timeout, in: context)
        let login = DeviceLoginService(tokens: oauth.tokens)
        let (user, scope) = (user, scope)
        let set = try AsyncBridge.wait {
            try await login.login(userId: user, scope: scope) { authorization in
                var text = "To log \(TextTable.printable(user)) in, open \(TextTable.printable(authorization.verificationURI)) "
                    + "and enter the code \(TextTable.printable(authorization.userCode))\n"
                if let complete = authorization.verificationURIComplete {
                    text += "or open \(TextTable.printable(complete))\n"
                }
                text += "waiting for approval (the code expires in \(authorization.expiresIn) s)…\n"
                context.streams.error.write(text)
            }
        }
        try globals.render(TokenSetOutput(set: set, confirmation: "logged \(user) in: \(set.tokenType) tokens\(set.bound ? " bound to a DPoP key" : "") stored"), in: context)
    }
}
