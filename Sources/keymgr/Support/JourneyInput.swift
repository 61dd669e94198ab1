import ArgumentParser
import Foundation
import KeyManager
import Synchronization

/// `--journey NAME [--password-fd N]`: run a PingAM journey against the configured server instead of working locally.
struct JourneyOptions: ParsableArguments {
    @Option(help: ArgumentHelp(
        "Run this PingAM journey (authentication tree) on the configured server; it supplies the challenge.",
        valueName: "name"))
    var journey: String?

    @Option(help: ArgumentHelp(
        "Read the journey's password from the first line of open file descriptor N (else a no-echo prompt).",
        valueName: "n"))
    var passwordFd: Int32?

    /// `--profile`: the server profile the journey runs on.
    @OptionGroup var server: ProfileOptions

    func validate() throws {
        if let journey, journey.isEmpty { throw ValidationError("--journey needs the journey's name") }
        if passwordFd != nil && journey == nil { throw ValidationError("--password-fd is for --journey: add --journey NAME") }
        if let passwordFd, passwordFd < 0 { throw ValidationError("--password-fd needs a file descriptor number (0 or more)") }
    }

    /// Refuses, with a usage error, options whose values the journey's server decides.
    static func refuse(_ options: [(name: String, given: Bool)]) throws {
        let given = options.filter(\.given).map(\.name)
        guard !given.isEmpty else { return }
        throw ValidationError("with --journey the server decides \(given.joined(separator: ", ")): drop \(given.count == 1 ? "it" : "them")")
    }

    /// The password for the journey's PasswordCallback: `--password-fd N`, else a no-echo prompt on the request's
    /// terminal when its stdin is a terminal. The source holds what it reads from, so the journey's callback, which
    /// runs on a thread of its own, asks on the request's terminal.
    func passwordSource(for login: String, in context: CommandContext) -> PasswordSource {
        if let passwordFd {
            return PasswordSource(kind: .descriptor(context.readable(passwordFd), named: passwordFd), login: login)
        }
        return PasswordSource(kind: context.inputIsTerminal ? .terminal(context.terminal) : .none, login: login)
    }
}

/// Reads the journey's password once, only if the journey asks for it, and keeps it for a repeated callback.
final class PasswordSource: Sendable {
    enum Kind: Sendable {
        /// `--password-fd N`: the descriptor to read (-1 when the request may not read N for the caller) and N.
        case descriptor(Int32, named: Int32)
        case terminal(ControllingTerminal)
        case none
    }

    private let kind: Kind
    private let login: String
    private let password = Mutex<SecretBytes?>(nil)

    init(kind: Kind, login: String) {
        self.kind = kind
        self.login = login
    }

    func read() throws -> SecretBytes {
        try password.withLock { password in
            if let password { return password }
            let read = try fetch()
            password = read
            return read
        }
    }

    private func fetch() throws -> SecretBytes {
        var bytes: [UInt8]
        switch kind {
        case .descriptor(let readable, let descriptor):
            let input = LineInput(descriptor: readable, name: "file descriptor \(descriptor)")
            guard let line = try input.line(0) else {
                throw CommandFailure(.abort, "no password on file descriptor \(descriptor): expected it on the first line")
            }
            bytes = line
        case .terminal(let terminal):
            bytes = try Terminal.readHidden(prompt: "Password for \(login): ", on: terminal, secret: "the password",
                                            alternative: "--password-fd N")
        case .none:
            throw CommandFailure(.abort, "the journey asks for a password and there is no terminal to ask on: pass --password-fd N")
        }
        defer { bytes.wipe() }
        guard !bytes.isEmpty else { throw CommandFailure(.abort, "no password entered: nothing was done") }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw CommandFailure(.badInput, "the password is not valid UTF-8 text")
        }
        return SecretBytes(utf8: text)
    }
}
