// The oracle for tests/test_properties.py: what java.util.Properties.load(Reader) makes of each
// case. Run with a JDK 11+ single-file launch: java PropertiesOracle.java < cases.tsv
//
// Input, one case per line:  name TAB base64(UTF-8 text of the properties file)
// Output, one case per line: name TAB OK (TAB base64(UTF-16BE key) TAB base64(UTF-16BE value))*
//                        or  name TAB ERR TAB exception class and message
// Keys and values travel as UTF-16BE so that lone surrogates (possible in a Java String) survive.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.StringReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collections;
import java.util.List;
import java.util.Properties;

public class PropertiesOracle {
    /** The UTF-16 code units of s, big-endian; unlike getBytes, keeps lone surrogates. */
    static byte[] units(String s) {
        byte[] b = new byte[s.length() * 2];
        for (int i = 0; i < s.length(); i++) {
            b[2 * i] = (byte) (s.charAt(i) >> 8);
            b[2 * i + 1] = (byte) s.charAt(i);
        }
        return b;
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        StringBuilder out = new StringBuilder();
        Base64.Encoder enc = Base64.getEncoder();
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) continue;
            String[] parts = line.split("\t", 2);
            String text = new String(Base64.getDecoder().decode(parts[1]), StandardCharsets.UTF_8);
            out.append(parts[0]);
            try {
                Properties props = new Properties();
                props.load(new StringReader(text));
                List<String> keys = new ArrayList<>(props.stringPropertyNames());
                Collections.sort(keys);
                out.append("\tOK");
                for (String key : keys) {
                    out.append('\t').append(enc.encodeToString(units(key)));
                    out.append('\t').append(enc.encodeToString(units(props.getProperty(key))));
                }
            } catch (Exception e) {
                out.append("\tERR\t").append(e.getClass().getName()).append(": ").append(e.getMessage());
            }
            out.append('\n');
        }
        System.out.print(out);
    }
}
