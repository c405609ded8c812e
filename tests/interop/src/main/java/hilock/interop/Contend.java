package hilock.interop;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Lock;

import org.redisson.Redisson;
import org.redisson.api.RBucket;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;
import org.redisson.config.Config;

/**
 * One Java contender for the Redisson interoperability tests.
 *
 * Usage: java -jar interop.jar REDIS_URL LOCK_NAME KIND, where KIND is
 * rlock, fair, read or write (RLock, RFairLock, or a side of
 * RReadWriteLock). It prints "ready", then runs one command per line of
 * standard input and answers on standard output, times from System.nanoTime
 * (CLOCK_MONOTONIC on Linux):
 *
 *   lock               lock(): "locked T COUNT" once held (COUNT: hold count)
 *   trylock MS         tryLock(MS): "locked T COUNT" or "busy T"
 *   unlock             unlock(): "unlocking T" before, "unlocked T" after
 *   count N KEY SLEEP  N times: lock, GET KEY, sleep SLEEP ms, SET KEY+1,
 *                      unlock; "enter T" / "leave T" around each hold, then
 *                      "done"
 *   quit               shut down and exit
 *
 * A failure prints "error MESSAGE" and exits with status 1.
 */
public final class Contend {
    private Contend() {
    }

    private static void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: REDIS_URL LOCK_NAME rlock|fair|read|write");
            System.exit(2);
        }
        Config config = new Config();
        config.useSingleServer().setAddress(args[0]).setConnectionMinimumIdleSize(1)
                .setConnectionPoolSize(4).setSubscriptionConnectionMinimumIdleSize(1);
        RedissonClient redisson = Redisson.create(config);
        String kind = args[2];
        RLock lock;
        switch (kind) {
            case "rlock": lock = redisson.getLock(args[1]); break;
            case "fair": lock = redisson.getFairLock(args[1]); break;
            case "read": lock = redisson.getReadWriteLock(args[1]).readLock(); break;
            case "write": lock = redisson.getReadWriteLock(args[1]).writeLock(); break;
            default:
                System.err.println("unknown kind " + kind);
                redisson.shutdown();
                System.exit(2);
                return;
        }
        int status = 0;
        try {
            say("ready");
            BufferedReader in = new BufferedReader(
                    new InputStreamReader(System.in, StandardCharsets.UTF_8));
            String line;
            while ((line = in.readLine()) != null) {
                String[] w = line.trim().split("\\s+");
                if (w[0].equals("quit")) {
                    break;
                } else if (w[0].equals("lock")) {
                    lock.lock();
                    long t = System.nanoTime();
                    say("locked " + t + " " + lock.getHoldCount());
                } else if (w[0].equals("trylock")) {
                    if (lock.tryLock(Long.parseLong(w[1]), TimeUnit.MILLISECONDS)) {
                        long t = System.nanoTime();
                        say("locked " + t + " " + lock.getHoldCount());
                    } else {
                        say("busy " + System.nanoTime());
                    }
                } else if (w[0].equals("unlock")) {
                    say("unlocking " + System.nanoTime());
                    lock.unlock();
                    say("unlocked " + System.nanoTime());
                } else if (w[0].equals("count")) {
                    count(redisson, lock, Integer.parseInt(w[1]), w[2], Long.parseLong(w[3]));
                    say("done");
                } else if (!w[0].isEmpty()) {
                    say("error unknown command " + w[0]);
                    status = 1;
                    break;
                }
            }
        } catch (Exception e) {
            say("error " + e);
            status = 1;
        } finally {
            redisson.shutdown();
        }
        System.exit(status);
    }

    /* The shared non-atomic counter: read, pause, write back, under the lock. */
    private static void count(RedissonClient redisson, Lock lock, int n, String key, long sleepMs)
            throws InterruptedException {
        RBucket<String> counter = redisson.getBucket(key, StringCodec.INSTANCE);
        for (int i = 0; i < n; i++) {
            lock.lock();
            try {
                say("enter " + System.nanoTime());
                String v = counter.get();
                long next = (v == null ? 0 : Long.parseLong(v)) + 1;
                if (sleepMs > 0) {
                    Thread.sleep(sleepMs);
                }
                counter.set(Long.toString(next));
                say("leave " + System.nanoTime());
            } finally {
                lock.unlock();
            }
        }
    }
}
