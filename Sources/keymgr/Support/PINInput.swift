import ArgumentParser
import Foundation
import KeyManager

/// Where a command reads PINs: `--pin-stdin`, `--pin-fd N`, or a no-echo prompt on the terminal.
///
/// There is deliberately no way to pass a PIN in argv or the environment: both are visible to other processes.
struct PINOptions: ParsableArguments {
    @Flag(help: "Read the PIN from the first line of stdin (typed on a terminal: asked without echo).")
    var pinStdin = false

    @Option(help: ArgumentHelp(
        "Read the PIN from the first line of open file descriptor N.",
        valueName: "n"))
    var pinFd: Int32?

    func validate() throws {
        if pinStdin && pinFd != nil { throw ValidationError("use either --pin-stdin or --pin-fd, not both") }
        if let pinFd, pinFd < 0 { throw ValidationError("--pin-fd needs a file descriptor number (0 or more)") }
    }

    /// The PIN source these options choose for the request; a terminal prompt only when its stdin is a terminal.
    func source(in context: CommandContext) -> PINSource { PINSource.choose(stdin: pinStdin, fd: pinFd, in: context) }
}

/// Hands the library `SecretProvider`s that read a PIN only when the operation turns out to need one.
///
/// Line sources give one PIN per line, in order (line 1 is the old PIN and line 2 the new one for a change,
/// whatever order the library asks in). The terminal asks without echo, and asks twice for a new PIN.
final class PINSource {
    enum Kind {
        case lines(LineInput)
        /// A no-echo prompt on the request's terminal; a refused new PIN is said on `error`, the request's stderr.
        case terminal(ControllingTerminal, error: StandardStream)
        case none
    }

    private let kind: Kind

    init(kind: Kind) { self.kind = kind }

    /// `--pin-stdin`, else `--pin-fd N`, else a terminal prompt when the request's stdin is a terminal, else none.
    /// `--pin-stdin` typed on a terminal (stdin is one) is the no-echo prompt too: a PIN is never echoed.
    static func choose(stdin: Bool, fd: Int32?, in context: CommandContext) -> PINSource {
        let terminal = Kind.terminal(context.terminal, error: context.streams.error)
        if stdin, context.inputIsTerminal { return PINSource(kind: terminal) }
        if stdin { return PINSource(kind: .lines(LineInput(descriptor: context.streams.input, name: "stdin"))) }
        if let fd { return PINSource(kind: .lines(LineInput(descriptor: context.readable(fd), name: "file descriptor \(fd)"))) }
        if context.inputIsTerminal { return PINSource(kind: terminal) }
        return PINSource(kind: .none)
    }

    /// The PIN of an existing key (line 1).
    func current(for what: String) -> SecretProvider {
        { [self] in try read(line: 0, prompt: "PIN for \(what): ") }
    }

    /// A new PIN for a new key (line 1). On a terminal it is checked against `policy` first (asked again when it
    /// fails), then asked a second time.
    func new(for what: String, policy: @escaping (SecretBytes) throws -> Void) -> SecretProvider {
        { [self] in try read(line: 0, prompt: "New PIN for \(what): ", policy: policy) }
    }

    /// The old and new PIN of a PIN change (lines 1 and 2).
    func change(for what: String, policy: @escaping (SecretBytes) throws -> Void) -> (old: SecretProvider, new: SecretProvider) {
        ({ [self] in try read(line: 0, prompt: "Current PIN for \(what): ") },
         { [self] in try read(line: 1, prompt: "New PIN for \(what): ", policy: policy) })
    }

    /// How often a person at the terminal may choose a PIN the policy refuses before keymgr gives up.
    static let newPINAttempts = 3

    /// Reads one PIN; a new one (`policy` given) is checked, and on a terminal confirmed by asking again.
    private func read(line index: Int, prompt: String, policy: ((SecretBytes) throws -> Void)? = nil) throws -> SecretBytes {
        switch kind {
        case .lines(let input):
            guard var bytes = try input.line(index) else {
                throw CommandFailure(.abort, index == 0
                    ? "no PIN on \(input.name): expected it on the first line"
                    : "no new PIN on \(input.name): expected the old PIN on the first line and the new one on the second")
            }
            defer { bytes.wipe() }
            return try Self.secret(from: bytes)
        case .terminal(let terminal, let error):
            guard let policy else { return try Self.secret(from: try Terminal.readHidden(prompt: prompt, on: terminal)) }
            for attempt in 1...Self.newPINAttempts {
                var first = try Terminal.readHidden(prompt: prompt, on: terminal)
                defer { first.wipe() }
                let candidate = try Self.secret(from: first)
                do {
                    try policy(candidate)
                } catch let refusal as any KeymgrFailure where refusal.code == .badInput && attempt < Self.newPINAttempts {
                    // Said before "Repeat", so nobody types a refused PIN twice.
                    error.write("keymgr: \(refusal.message)\n")
                    continue
                }
                var second = try Terminal.readHidden(prompt: "Repeat the new PIN: ", on: terminal)
                defer { second.wipe() }
                guard first == second else { throw CommandFailure(.badInput, "the two PINs differ: nothing was changed") }
                return candidate
            }
            throw CommandFailure(.badInput, "no acceptable PIN was chosen: nothing was changed")
        case .none:
            throw CommandFailure(.abort,
                "this key needs a PIN and there is no terminal to ask on: pass --pin-stdin or --pin-fd N")
        }
    }

    /// The PIN's bytes as they were read: checked as UTF-8 without ever becoming a `String`.
    private static func secret(from bytes: [UInt8]) throws -> SecretBytes {
        guard !bytes.isEmpty else { throw CommandFailure(.abort, "no PIN entered: nothing was done") }
        guard PINText.isValidUTF8(bytes) else {
            throw CommandFailure(.badInput, "the PIN is not valid UTF-8 text")
        }
        return SecretBytes(bytes)
    }
}

/// Lines read one byte at a time from a descriptor, so nothing beyond the lines asked for is consumed.
///
/// A line longer than `maxLineBytes` is refused while it is read (`badInput`, 65): a PIN or password is never that
/// long, and a huge one must cost neither memory nor, for a PIN, an attempt (it is refused before the library counts).
final class LineInput {
    /// The longest PIN or password line keymgr reads (the PIN policy allows 64 characters, at most 256 bytes).
    static let maxLineBytes = KeyManager.maxSecretInputBytes
    let descriptor: Int32
    let name: String
    private var lines: [[UInt8]] = []
    private var ended = false

    init(descriptor: Int32, name: String) {
        self.descriptor = descriptor
        self.name = name
    }

    deinit {
        for index in lines.indices { lines[index].wipe() }
    }

    /// Line `index` (0-based) without its line ending, or nil when the input ends before it.
    func line(_ index: Int) throws -> [UInt8]? {
        while lines.count <= index, !ended {
            var line: [UInt8] = []
            var byte: UInt8 = 0
            var sawAny = false
            while true {
                let count = Foundation.read(descriptor, &byte, 1)
                if count < 0 {
                    if errno == EINTR { continue }
                    line.wipe()
                    throw CommandFailure(.badInput, "cannot read from \(name): \(String(cString: strerror(errno)))")
                }
                if count == 0 { ended = true; break }
                sawAny = true
                if byte == 0x0A { break }
                guard line.count < Self.maxLineBytes else {
                    line.wipe()
                    byte = 0
                    throw CommandFailure(.badInput, "the line on \(name) is longer than \(Self.maxLineBytes) bytes: a PIN or "
                        + "password is never that long, so nothing was tried (no PIN attempt was spent)")
                }
                line.append(byte)
            }
            byte = 0
            if line.last == 0x0D { line.removeLast() }
            if sawAny { lines.append(line) }
        }
        return index < lines.count ? lines[index] : nil
    }
}

/// The controlling terminal, for prompts that must not echo.
enum Terminal {
    /// Reads one line from the person's terminal (the request's, `terminal`) with echo off, restoring the terminal
    /// afterwards (and on Ctrl-C).
    /// - Parameters:
    ///   - secret: what is asked for, for messages ("the PIN", "the password").
    ///   - alternative: the options that give it without a terminal.
    static func readHidden(prompt: String, on terminal: ControllingTerminal, secret: String = "the PIN",
                           alternative: String = "--pin-stdin or --pin-fd N") throws -> [UInt8] {
        let tty = terminal.open(flags: O_RDWR | O_NOCTTY)
        guard tty >= 0 else {
            throw CommandFailure(.abort, "cannot open the terminal to ask for \(secret): pass \(alternative)")
        }
        defer { close(tty) }
        var saved = termios()
        guard tcgetattr(tty, &saved) == 0 else {
            throw CommandFailure(.abort, "cannot switch off echo on the terminal: pass \(alternative)")
        }
        var hidden = saved
        hidden.c_lflag &= ~tcflag_t(ECHO | ECHOE | ECHOK | ECHONL)
        hidden.c_lflag |= tcflag_t(ICANON)
        TerminalRestore.arm(descriptor: tty, settings: saved)
        defer {
            _ = tcsetattr(tty, TCSAFLUSH, &saved)
            TerminalRestore.disarm()
        }
        // Echo goes off before the prompt appears, so nothing typed after the prompt can be echoed.
        guard tcsetattr(tty, TCSAFLUSH, &hidden) == 0 else {
            throw CommandFailure(.abort, "cannot switch off echo on the terminal: pass \(alternative)")
        }
        StandardStream(descriptor: tty).write(prompt)
        let input = LineInput(descriptor: tty, name: "the terminal")
        let line = try input.line(0)
        StandardStream(descriptor: tty).write("\n")
        guard let line else { throw CommandFailure(.abort, "\(secret) was not entered: nothing was done") }
        return line
    }
}

/// Puts the terminal back when a signal ends keymgr in the middle of a no-echo prompt.
///
/// Signal handlers cannot capture context, so the saved settings live in process-wide state, set before and
/// cleared after the prompt (one prompt at a time), and read by the handler or by `restoreIfArmed` at exit.
enum TerminalRestore {
    nonisolated(unsafe) private static var descriptor: Int32 = -1
    nonisolated(unsafe) private static var settings = termios()

    static func arm(descriptor: Int32, settings: termios) {
        Self.settings = settings
        Self.descriptor = descriptor
        for signal in [SIGINT, SIGTERM, SIGHUP, SIGQUIT] {
            _ = Foundation.signal(signal) { received in
                if TerminalRestore.descriptor >= 0 {
                    var settings = TerminalRestore.settings
                    _ = tcsetattr(TerminalRestore.descriptor, TCSAFLUSH, &settings)
                }
                _ = Foundation.signal(received, SIG_DFL)
                _ = raise(received)
            }
        }
    }

    /// Puts the terminal back if a prompt is still open: keymgr is leaving without waiting for it (a journey's
    /// deadline passed while the prompt waited).
    static func restoreIfArmed() {
        guard descriptor >= 0 else { return }
        var saved = settings
        _ = tcsetattr(descriptor, TCSAFLUSH, &saved)
    }

    static func disarm() {
        descriptor = -1
        for signal in [SIGINT, SIGTERM, SIGHUP, SIGQUIT] { _ = Foundation.signal(signal, SIG_DFL) }
    }
}

extension Array where Element == UInt8 {
    /// Overwrites the bytes before letting go of them: PIN text should not linger in freed memory.
    mutating func wipe() {
        for index in indices { self[index] = 0 }
        removeAll()
    }
}
