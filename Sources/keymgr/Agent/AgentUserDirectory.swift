import Foundation

/// Whether a uid has an entry in the user database, for the agent's shares: every uid without one (a person's
/// subordinate uid range, a container's uids) counts against one share, so 65,536 uids are not 65,536 people.
///
/// The agent never calls into the user database itself: an nss module may leave a descriptor or a thread in the
/// process, which every worker would inherit. A child process, `keymgr-users`, answers instead, one uid at a time
/// over a `SOCK_SEQPACKET` socketpair; the agent keeps answers for a minute and never waits for one (the connection
/// waits, `AgentServer`).
final class AgentUserDirectory {
    /// How long an answer is kept.
    static let keptFor: Double = 60
    /// How long a connection waits for an answer before its uid counts as its own share.
    static let patience: Double = 2
    /// The most answers kept; beyond it they are all dropped (and asked again when needed).
    static let maximumKept = 65536

    private var pid: pid_t = 0
    private(set) var channel: Int32 = -1
    private var known: [UInt32: (hasEntry: Bool, until: Double)] = [:]
    private var asked: Set<UInt32> = []

    /// Whether `uid` has an entry, when known; nil when the answer is not in yet (`ask` it).
    func hasEntry(_ uid: UInt32, now: Double) -> Bool? {
        if uid == 0 || uid == getuid() { return true }
        guard let answer = known[uid], answer.until > now else { return nil }
        return answer.hasEntry
    }

    /// Asks about `uid` (once while the question is open), starting the helper if it is not running.
    func ask(_ uid: UInt32) {
        guard !asked.contains(uid) else { return }
        if channel < 0 { startHelper() }
        guard channel >= 0 else { return }
        var word = uid
        if send(channel, &word, 4, Int32(MSG_DONTWAIT | MSG_NOSIGNAL)) == 4 { asked.insert(uid) }
    }

    /// Reads the answers that arrived; returns the uids answered.
    func readAnswers(now: Double) -> [UInt32] {
        var answered: [UInt32] = []
        var message = [UInt8](repeating: 0, count: 8)
        while channel >= 0 {
            let got = recv(channel, &message, message.count, Int32(MSG_DONTWAIT))
            if got < 0 && errno == EINTR { continue }
            if got != 5 {
                if got == 0 || (got < 0 && errno != EAGAIN) { stopHelper() }  // gone: started again when asked
                break
            }
            let uid = UInt32(message[0]) | UInt32(message[1]) << 8 | UInt32(message[2]) << 16 | UInt32(message[3]) << 24
            if known.count >= Self.maximumKept { known = [:] }
            known[uid] = (message[4] == 1, now + Self.keptFor)
            asked.remove(uid)
            answered.append(uid)
        }
        return answered
    }

    /// Forgets the helper when it was `exited`; whether it was.
    func exited(_ child: pid_t) -> Bool {
        guard child == pid, pid > 0 else { return false }
        pid = 0
        stopHelper()
        return true
    }

    /// Ends the helper (the agent stops).
    func end() {
        stopHelper()
    }

    private func stopHelper() {
        if channel >= 0 { close(channel) }  // the helper reads end of file and exits
        channel = -1
        asked = []
    }

    private func startHelper() {
        var ends: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0 else { return }
        let child = fork()
        if child == 0 {
            close(ends[0])
            Self.serve(ends[1])
        }
        close(ends[1])
        guard child > 0 else {
            close(ends[0])
            return
        }
        pid = child
        channel = ends[0]
    }

    /// The helper: answers each uid with whether it has an entry, until the agent closes the channel.
    private static func serve(_ channel: Int32) -> Never {
        AgentSignals.resetInWorker()
        AgentProcessName.set("keymgr-users")
        AgentWorker.closeAll(except: [0, 1, 2, channel])
        var word: UInt32 = 0
        while true {
            let got = recv(channel, &word, 4, 0)
            if got < 0 && errno == EINTR { continue }
            guard got == 4 else { _exit(0) }
            errno = 0
            let entry = getpwuid(word)
            // No entry (getpwuid(3)'s "not found" errors), or an entry; a failing user database counts as an entry,
            // so no one is put in the shared share for it.
            let notFound = [0, ENOENT, ESRCH, EBADF, EPERM].contains(errno)
            let hasEntry: UInt8 = entry == nil && notFound ? 0 : 1
            var answer = [UInt8(word & 0xff), UInt8(word >> 8 & 0xff), UInt8(word >> 16 & 0xff), UInt8(word >> 24), hasEntry]
            _ = send(channel, &answer, answer.count, Int32(MSG_NOSIGNAL))
        }
    }
}
