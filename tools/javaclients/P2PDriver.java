// Harness for Shaflo/P2P-Client (not part of the original project).
//
// The original P2P.main() starts TWO peers in one JVM (peer 0: leader on 3333,
// peer 1: port 3334, leader "192.168.75.36") and is driven only through a Swing
// window. This driver instead starts ONE peer, exactly as main() does for one
// instance (private constructor P2P(port, leader) + private startPeer()), and
// turns stdin lines into the same button clicks the window offers, run on the
// Swing event thread like a real click. It changes no protocol logic.
//
//   java -cp <P2P-Client classes>:<driver classes> P2PDriver <ownPort> <leader>
//        leader = "localhost" -> start as leader (P2P-Client.sh does this; build.sh compiles it)
//
// stdin commands:
//   search <id>          = type <id> in the search field, click "search"
//   elect                = click "start Voting"
//   timesync             = click "startTimeSync"
//   msg <id> <text>      = type ID and MSG, click "send"
//   list | status | chat = print the node list / state / received texts
//   quit                 = System.exit(0)
// Received texts (tag 8) only appear in the window's chat area: the driver
// echoes every append to that area on stdout as "CHAT: ...".
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.Constructor;
import java.lang.reflect.Method;
import javax.swing.SwingUtilities;
import javax.swing.event.DocumentEvent;
import javax.swing.event.DocumentListener;

public class P2PDriver {
    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        String leader = args[1];
        String lp = System.getenv("LEADER_PORT");
        if (lp != null && !lp.isEmpty()) P2P.defaultPort = Integer.parseInt(lp); // the "Settings" block's static

        Constructor<P2P> c = P2P.class.getDeclaredConstructor(int.class, String.class);
        c.setAccessible(true);
        final P2P peer = c.newInstance(port, leader);
        Method start = P2P.class.getDeclaredMethod("startPeer");
        start.setAccessible(true);
        start.invoke(peer);
        System.out.println("DRIVER: started P2P peer ip=" + peer.ip + " port=" + peer.port + " leader=" + peer.leader
                + " isLeader=" + peer.isLeader + " leaderPort=" + P2P.defaultPort);

        peer.chatInTA.getDocument().addDocumentListener(new DocumentListener() {
            public void insertUpdate(DocumentEvent e) {
                try {
                    System.out.println("CHAT: " + e.getDocument().getText(e.getOffset(), e.getLength()).trim());
                } catch (Exception ex) { }
            }
            public void removeUpdate(DocumentEvent e) { }
            public void changedUpdate(DocumentEvent e) { }
        });

        BufferedReader r = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = r.readLine()) != null) {
            final String[] p = line.trim().split(" ", 3);
            if (p[0].isEmpty()) continue;
            System.out.println("DRIVER: command '" + line.trim() + "'");
            switch (p[0]) {
                case "search":
                    SwingUtilities.invokeLater(() -> { peer.searchTF.setText(p[1]); peer.startSearch.doClick(); });
                    break;
                case "elect":
                    SwingUtilities.invokeLater(() -> peer.electButton.doClick());
                    break;
                case "timesync":
                    SwingUtilities.invokeLater(() -> peer.startSync.doClick());
                    break;
                case "msg":
                    SwingUtilities.invokeLater(() -> {
                        peer.chatID.setText(p[1]);
                        peer.chatMSG.setText(p.length > 2 ? p[2] : "");
                        peer.chatSend.doClick();
                    });
                    break;
                case "list":
                    System.out.println("DRIVER: list\n" + peer.listTA.getText());
                    break;
                case "status":
                    System.out.println("DRIVER: status id=" + peer.id + " connected=" + peer.connected + " leader=" + peer.leader
                            + ":" + P2P.defaultPort + " isLeader=" + peer.isLeader + " doLeaderElection=" + peer.doLeaderElection
                            + " myTimeLong=" + peer.myTimeLong + " (system " + System.currentTimeMillis() + ", diff "
                            + (peer.myTimeLong - System.currentTimeMillis()) + " ms)");
                    break;
                case "chat":
                    System.out.println("DRIVER: chat\n" + peer.chatInTA.getText());
                    break;
                case "quit":
                    System.exit(0);
                default:
                    System.out.println("DRIVER: unknown command");
            }
        }
        // stdin closed: keep running (the real client has no stdin at all)
        Thread.currentThread().join();
    }
}
