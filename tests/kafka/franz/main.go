// franz-go (its defaults: an idempotent producer) against ringlog's Kafka
// listener: produce COUNT keyed records with a header, read them back as a
// member of consumer group GROUP, commit, and print one line per finding
// for tests/tests/it/kafka_groups.rs to check.
//
// go run . BOOTSTRAP TOPIC COUNT GROUP
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	bootstrap, topic, group := os.Args[1], os.Args[2], os.Args[4]
	count, _ := strconv.Atoi(os.Args[3])
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	producer, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(bootstrap, ",")...))
	if err != nil {
		panic(err)
	}
	records := make([]*kgo.Record, count)
	for i := range records {
		records[i] = &kgo.Record{
			Topic:   topic,
			Key:     []byte("k" + strconv.Itoa(i)),
			Value:   []byte(strconv.Itoa(i)),
			Headers: []kgo.RecordHeader{{Key: "n", Value: []byte(strconv.Itoa(i))}},
		}
	}
	if err := producer.ProduceSync(ctx, records...).FirstErr(); err != nil {
		panic(err)
	}
	producer.Close()
	fmt.Println("produced", count)

	consumer, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
	)
	if err != nil {
		panic(err)
	}
	seen := map[int]bool{}
	bad := 0
	for len(seen) < count && ctx.Err() == nil {
		fetches := consumer.PollFetches(ctx)
		fetches.EachError(func(t string, p int32, err error) {
			fmt.Fprintln(os.Stderr, "fetch error", t, p, err)
		})
		fetches.EachRecord(func(r *kgo.Record) {
			n, err := strconv.Atoi(string(r.Value))
			if err != nil || string(r.Key) != "k"+strconv.Itoa(n) || len(r.Headers) != 1 || string(r.Headers[0].Value) != strconv.Itoa(n) {
				bad++
				return
			}
			seen[n] = true
		})
		if err := consumer.CommitUncommittedOffsets(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "commit error", err)
		}
	}
	fmt.Println("consumed", len(seen), "bad", bad)
	committed := consumer.CommittedOffsets()
	total := 0
	for _, partitions := range committed {
		total += len(partitions)
	}
	fmt.Println("committed_partitions", total)
	consumer.Close()
}
