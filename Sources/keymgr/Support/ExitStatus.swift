import AgentWire
import ArgumentParser
import Foundation
import KeyManager

/// The exit-code table of the README: the one place an error code becomes a process status.
extension FailureCode {
    var exitStatus: Int32 {
        switch self {
        case .failure, .tampered, .declined, .rolledBack: 1
        case .safetyValve: 3
        case .usage: 64
        case .badInput, .invalidCustomClaims: 65
        case .clientNotRegistered: 66
        case .serverUnavailable, .unsupported: 69
        case .busy, .timeout: 75
        case .serverRejected: 76
        case .unAuthorize, .pinLocked, .abort, .denied: 77
        case .config: 78
        }
    }
}

/// A run that failed after printing its result (sync's report): stdout keeps that one document, the message goes
/// to stderr, and the exit status comes from the code.
struct FailureAfterReport: KeymgrFailure {
    let code: FailureCode
    let message: String

    init(_ code: FailureCode, _ message: String) {
        self.code = code
        self.message = message
    }
}

/// Reports a failed command the way the CLI contract says, and returns the process status.
///
/// A person gets `keymgr: <message>` on stderr; with `--json`, stdout also gets `{"error":{"code","message"}}`.
enum FailureReport {
    /// A failure while parsing the command line (usage, 64), or a request for help or completions (0).
    static func parsing(_ error: Error, json: Bool, on streams: StandardStreams) -> Int32 {
        let status = Keymgr.exitCode(for: error)
        if status.isSuccess {
            // --help, --generate-completion-script and friends: their text is the answer.
            streams.output.write(Keymgr.fullMessage(for: error) + "\n")
            return status.rawValue
        }
        var text = Keymgr.fullMessage(for: error)
        if text.hasPrefix("Error: ") { text = "keymgr: " + text.dropFirst("Error: ".count) }
        streams.error.write(text + "\n")
        if json {
            emitJSON(code: FailureCode.usage.rawValue, message: Keymgr.message(for: error), on: streams)
        }
        return FailureCode.usage.exitStatus
    }

    /// A failure while running a command.
    static func running(_ error: Error, json: Bool, verbose: Bool, on streams: StandardStreams) -> Int32 {
        if let exit = error as? ExitCode { return exit.rawValue }  // the command has already said why
        if let after = error as? FailureAfterReport {
            // The command's document is already on stdout: the reason goes to stderr alone.
            streams.error.write("keymgr: \(PrintableText.stripped(after.message))\n")
            return after.code.exitStatus
        }
        let failure: any KeymgrFailure = error as? any KeymgrFailure
            ?? CommandFailure(.failure, "unexpected error: \(String(describing: error))")
        // A message may quote what a server sent: no control or bidi character of it reaches the terminal.
        let message = PrintableText.stripped(failure.message)
        streams.error.write("keymgr: \(message)\n")
        if verbose {
            streams.error.write("keymgr: error code \(failure.code.rawValue), exit status \(failure.code.exitStatus)\n")
        }
        if json { emitJSON(code: failure.code.rawValue, message: message, on: streams) }
        return failure.code.exitStatus
    }

    /// `{"error":{"code","message"}}`.
    private struct ErrorJSON: Encodable {
        struct Detail: Encodable {
            let code: String
            let message: String
        }

        let error: Detail
    }

    private static func emitJSON(code: String, message: String, on streams: StandardStreams) {
        streams.output.write(Console.encoded(ErrorJSON(error: .init(code: code, message: message))) + "\n")
    }
}

/// The process's argv as the kernel passed it, before Swift decoded it.
enum RawArguments {
    /// The position (1-based, after the program name) of the first argument that is not valid UTF-8, if any.
    static func firstInvalidUTF8() -> Int? {
        for index in 1..<Int(CommandLine.argc) {
            guard let raw = CommandLine.unsafeArgv[index] else { continue }
            let bytes = UnsafeRawBufferPointer(start: raw, count: strlen(raw))
            if !PINText.isValidUTF8(bytes) { return index }
        }
        return nil
    }
}
