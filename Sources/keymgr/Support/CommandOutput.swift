import ArgumentParser
import Foundation
import KeyManager

/// What a command prints when it succeeds: one value, rendered as its `--json` document or as text for people. A
/// command builds the value and calls `GlobalOptions.render(_:in:)`, the one place that branches on `--json`; both
/// forms of an output live in its type.
protocol CommandOutput {
    /// Writes the `--json` document on stdout.
    func json(on console: Console) throws
    /// Writes the text for people.
    func text(on console: Console) throws
}

/// An output whose `--json` document is one value, encoded whole.
protocol DocumentOutput: CommandOutput {
    associatedtype Document: Encodable
    /// The `--json` document (stdout).
    var document: Document { get throws }
}

extension DocumentOutput {
    func json(on console: Console) throws { console.answer(json: try document) }
}

extension GlobalOptions {
    /// Prints `output` as `--json` asks, on the request's console.
    func render(_ output: some CommandOutput, in context: CommandContext) throws {
        let console = console(in: context)
        if json {
            try output.json(on: console)
        } else {
            try output.text(on: console)
        }
    }

    /// A `--format` other than `json` beside `--json` is a usage error: the two ask for different output.
    func checkFormat(_ format: String?) throws {
        if json, let format, format != "json" {
            throw ValidationError("--json prints JSON: drop it or drop --format \(format)")
        }
    }
}

/// A token set (`token import`, `token refresh`, `login`): the `token show` object, or one confirmation line.
struct TokenSetOutput: DocumentOutput {
    let set: TokenSet
    let confirmation: String

    var document: TokenSetJSON { TokenSetJSON(set, secrets: nil) }

    func text(on console: Console) { console.confirm(confirmation) }
}

/// `token show`: the object, or aligned `name  value` lines.
struct TokenShowOutput: DocumentOutput {
    let set: TokenSet
    let secrets: TokenSecrets?

    var document: TokenSetJSON { TokenSetJSON(set, secrets: secrets) }

    func text(on console: Console) {
        let hidden = { (held: Bool) in held ? "(sealed; --reveal shows it)" : "-" }
        console.answer(Self.aligned([
            ("user", set.userId), ("client id", set.clientId), ("token type", set.tokenType),
            ("bound", set.bound ? "yes (DPoP key \(set.jkt ?? "-"))" : "no"),
            ("scope", HumanText.text(set.scope)), ("expires", HumanText.time(set.expiresAt)),
            ("access token", secrets.map { HumanText.text($0.accessToken) } ?? hidden(true)),
            ("refresh token", secrets.map { HumanText.text($0.refreshToken) } ?? hidden(set.hasRefreshToken)),
            ("id token", secrets.map { HumanText.text($0.idToken) } ?? hidden(set.hasIdToken)),
            ("updated", HumanText.time(set.updatedAt)),
        ]))
    }

    /// `name  value` lines, the values in one column, each made printable.
    static func aligned(_ lines: [(String, String)]) -> String {
        let width = lines.map(\.0.count).max() ?? 0
        return lines.map { $0.0 + String(repeating: " ", count: width - $0.0.count + 2) + TextTable.printable($0.1) }
            .joined(separator: "\n")
    }
}

/// `token print`: the access token alone, or `{"accessToken","tokenType","expiresAt"}`.
struct PrintedTokenOutput: DocumentOutput {
    let token: String
    let set: TokenSet

    var document: PrintedTokenJSON { PrintedTokenJSON(accessToken: token, tokenType: set.tokenType, expiresAt: set.expiresAt) }

    func text(on console: Console) { console.answer(token) }
}

/// `dcr register` and `dcr show`: the `dcr show` object, or (register) a confirmation line or (show) `name  value` lines.
struct RegistrationOutput: DocumentOutput {
    let registration: Registration
    let secrets: RegistrationSecrets?
    /// Set for `dcr register`; nil for `dcr show`.
    let confirmation: String?
    /// `dcr register`'s warnings about the granted grant types (also on stderr); nil for `dcr show`.
    var warnings: [String]?

    var document: RegistrationJSON { RegistrationJSON(registration, secrets: secrets, warnings: warnings) }

    func text(on console: Console) {
        if let confirmation {
            console.confirm(confirmation)
            return
        }
        var lines: [(String, String)] = [
            ("user", registration.userId), ("client id", registration.clientId),
            ("client secret", secrets.map { HumanText.text($0.clientSecret) }
                ?? (registration.hasClientSecret ? "(sealed; --reveal shows it)" : "-")),
            ("registration URI", HumanText.text(registration.registrationClientURI?.absoluteString)),
            ("issued", HumanText.time(registration.clientIdIssuedAt)),
            ("secret expires", registration.clientSecretExpiresAt.map { HumanText.time($0) } ?? "never"),
            ("auth method", HumanText.text(registration.tokenEndpointAuthMethod)),
            ("grant types", registration.grantTypes.joined(separator: " ")),
            ("scope", HumanText.text(registration.scope)), ("software id", HumanText.text(registration.softwareId)),
            ("updated", HumanText.time(registration.updatedAt)),
        ]
        if let secrets { lines.append(("registration token", HumanText.text(secrets.registrationAccessToken))) }
        console.answer(TokenShowOutput.aligned(lines))
    }
}

/// `dpop proof`: the proof alone, or `{"proof","jkt"}`.
struct ProofOutput: DocumentOutput {
    let proof: String
    /// The DPoP key's thumbprint, read only for the document.
    let jkt: () throws -> String?

    var document: [String: String] { get throws { ["proof": proof, "jkt": try jkt() ?? ""] } }

    func text(on console: Console) { console.answer(proof) }
}
