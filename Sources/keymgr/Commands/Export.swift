import ArgumentParser
import KeyManager

/// `keymgr export`: a key's public half, as a JWK or PEM.
struct Export: KeymgrCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Print a key's public key as a JWK or PEM (never the private key).",
        usage: "keymgr export (--user <id> | --kid <kid>) [--format jwk|pem] [<options>]",
        discussion: """
            Prints the public key of the user's active or locked key (or of --kid: a kid or a unique prefix) on \
            stdout: a JWK (RFC 7517, {"kty","crv","x","y","use","alg","kid"}) or a PEM SubjectPublicKeyInfo that \
            `openssl pkey -pubin` reads. The private key never leaves the store. With --json: {"kid", "userId", \
            "jwk", "pem"}.

            Example:
              keymgr export --user alice > alice.jwk
              keymgr export --user alice --format pem | openssl pkey -pubin -text -noout
            """)

    @OptionGroup var globals: GlobalOptions

    @Option(help: ArgumentHelp("The user whose key to export.", valueName: "id"), completion: .custom(StoreCompletion.users))
    var user: String?

    @Option(help: ArgumentHelp("The key to export (a kid or a unique prefix of 8 or more characters).", valueName: "kid"), completion: .custom(StoreCompletion.kids))
    var kid: String?

    @Option(help: ArgumentHelp("jwk or pem.", valueName: "format"))
    var format: String = PublicKeyFormat.jwk.rawValue

    func validate() throws {
        if user == nil && kid == nil { throw ValidationError("say which key: --user ID or --kid KID") }
        guard PublicKeyFormat(rawValue: format) != nil else { throw ValidationError("--format must be jwk or pem, not '\(format)'") }
    }

    func run(in context: CommandContext) throws {
        let manager = try globals.openManager(in: context, readOnly: true)
        let exported = try manager.exportPublicKey(userId: try manager.resolveUser(user), kid: kid)
        try globals.render(ExportOutput(exported: exported, pem: PublicKeyFormat(rawValue: format) == .pem), in: context)
    }
}

/// `export`: `{"kid","userId","jwk","pem"}`, or the public key alone as `--format` asks (a JWK or PEM).
struct ExportOutput: DocumentOutput {
    let exported: ExportedPublicKey
    let pem: Bool

    var document: ExportJSON { ExportJSON(kid: exported.kid, userId: exported.userId, jwk: exported.jwk, pem: exported.pem) }

    func text(on console: Console) {
        if pem {
            console.answer(exported.pem)
        } else {
            console.answer(json: exported.jwk)
        }
    }
}

/// `export --json`.
struct ExportJSON: Encodable {
    let kid: String
    let userId: String
    let jwk: JWK
    let pem: String
}
