import Glibc

/// The person's terminal, passed to the agent for no-echo prompts, and its settings as they were before the call:
/// restored after the answer, and on SIGINT, SIGTERM and SIGHUP, since the agent may have turned echo off for a PIN
/// prompt when the person pressed Ctrl-C.
enum ClientTerminal {
    /// The open /dev/tty (close-on-exec), or -1. Read by the signal handler.
    nonisolated(unsafe) private static var descriptor: Int32 = -1
    /// The terminal's settings when the client started, when they could be read.
    nonisolated(unsafe) private static var saved = termios()
    nonisolated(unsafe) private static var hasSaved = false

    /// Opens the controlling terminal, if there is one, remembers its settings and installs the signal handlers.
    /// Returns the descriptor to pass, or nil.
    static func open() -> Int32? {
        let fd = Glibc.open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        descriptor = fd
        hasSaved = tcgetattr(fd, &saved) == 0
        for signal in [SIGINT, SIGTERM, SIGHUP] {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { number in
                ClientTerminal.restore()
                _exit(128 + number)
            }
            sigemptyset(&action.sa_mask)
            sigaction(signal, &action, nil)
        }
        return fd
    }

    /// Puts the settings back when they changed, and only while this client is the terminal's foreground job
    /// (a background client must not undo what the program in the foreground set). Async-signal-safe.
    static func restore() {
        guard descriptor >= 0, hasSaved, tcgetpgrp(descriptor) == getpgrp() else { return }
        var now = termios()
        guard tcgetattr(descriptor, &now) == 0 else { return }
        let same = now.c_iflag == saved.c_iflag && now.c_oflag == saved.c_oflag && now.c_cflag == saved.c_cflag
            && now.c_lflag == saved.c_lflag
        if !same { _ = tcsetattr(descriptor, TCSANOW, &saved) }
    }
}
